"""A deployment's progress message and root title: newest step only, never back in time, coalesced edits.

Events are written straight into the outbox in the order a busy deployment can produce them (a rollout line
naming an older step after the state moved on, admission changes after the ending) and delivered by the real
notifier to the Slack stub; every post and edit is read back in order.
"""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from slack_sdk import WebClient

from bot.adapters.slack.notifier import SlackNotifier
from bot.domain.events import AdmissionChanged, OutboxEvent, RolloutProgress, StateChanged
from bot.domain.states import DEPLOY_PATH, State
from bot.sandbox.slack_stub import SlackStub
from bot.services.deployments import request_deploy
from bot.services.releases import register_release
from tests.slack_support import progress_texts
from tests.workflow_support import REQUESTER, ROLES, endpoint_config, fake_ports, release_data

RANK = {state: i for i, state in enumerate(DEPLOY_PATH)}


@pytest.fixture()
def stub():
    with SlackStub() as s:
        yield s


def shown_step(text: str) -> State:
    """The step a progress message's first line shows."""
    head = text.split("\n")[0]
    for state in DEPLOY_PATH:
        if f"*Progress:* {state.during} (" in head or f"*Progress:* ended: {state.words} ·" in head:
            return state
    raise AssertionError(f"no step in {head!r}")


def root_steps(stub: SlackStub, ts: str) -> list[State]:
    """The state each version of the root's title named (its first line ends ``— <state>``)."""
    texts = [c.params["text"] for c in stub.calls_to("chat.postMessage") if c.params.get("thread_ts") is None]
    texts += [c.params["text"] for c in stub.calls_to("chat.update") if c.params.get("ts") == ts]
    by_words = {s.words: s for s in State}
    return [by_words[t.split("\n")[0].rsplit("— ", 1)[1]] for t in texts]


def replay(make_ctx, stub: SlackStub, every: float) -> tuple[SlackNotifier, int]:
    """A deploy's events, in the order a busy deployment writes them, delivered pass by pass."""
    ctx = make_ctx(endpoints=[endpoint_config(channel="C0PROD")], roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    view = request_deploy(ctx, "rel-a", None, REQUESTER)
    notifier = SlackNotifier(WebClient(token="xoxb-t", base_url=stub.api_url), ctx.uow, ctx.clock)
    notifier.thread.progress_every = every
    notifier.deliver_pending()

    def write(*events: OutboxEvent) -> None:
        with ctx.uow() as uow:
            for event in events:
                ctx.clock.advance(dt.timedelta(seconds=7))
                uow.events.emit(event, at=ctx.clock.now())
            uow.commit()
        notifier.deliver_pending()

    def move(before: State, after: State) -> StateChanged:
        return StateChanged(deployment_id=view.id, endpoint_name=view.endpoint, from_state=before, to_state=after,
                            reason=None, release="rel-a", kind="deploy")

    def line(message: str, state: State | None) -> RolloutProgress:
        return RolloutProgress(deployment_id=view.id, endpoint_name=view.endpoint, message=message, state=state)

    def admission(text: str) -> AdmissionChanged:
        return AdmissionChanged(deployment_id=view.id, endpoint_name=view.endpoint, text=text, admission="open",
                                reason="ramp", actor="kimi-ops")

    path = list(DEPLOY_PATH)
    for before, after in itertools.pairwise(path):
        if after is State.LIVE:
            write(admission("internal cohort admitted"), move(before, after), admission("everyone admitted"),
                  line("ramp step 3 held", State.RAMPING))  # the ramp's last words arrive after the ending
        elif after is State.READINESS:
            # Two rollout lines of older steps delivered after the state moved on, in one burst with it.
            write(move(before, after), line("pods 1/1 ready", State.ROLLING_OUT), line("drained", State.DRAINING))
        else:
            write(move(before, after))
    return notifier, view.id


@pytest.mark.parametrize("every", [1e-6, 0], ids=["a-pass-one-edit", "console-each-event"])
def test_a_replayed_deploy_never_shows_an_older_step_than_the_edit_before(make_ctx, stub, every: float) -> None:
    notifier, deployment = replay(make_ctx, stub, every=every)
    texts = progress_texts(stub, deployment)
    steps = [shown_step(t) for t in texts]
    assert all(RANK[a] <= RANK[b] for a, b in itertools.pairwise(steps)), steps
    assert steps[-1] is State.LIVE and "after it was requested" in texts[-1]
    if every:  # one version per pass, however many events it delivered: posted, then one edit per step
        assert len(texts) == len(DEPLOY_PATH) - 1
    else:  # the console shows each event's version (16 events after the request), each still the newest step
        assert len(texts) == len(DEPLOY_PATH) - 1 + 5
    # A line about an older step, delivered late, is not shown under a newer one.
    assert not any("drained" in t or "ramp step 3 held" in t for t in texts)
    assert texts[-1].endswith("*last:* → *live*")
    # The steps so far, in order, on the last version: every state the deploy passed.
    trail = texts[-1].split("*steps:* ", 1)[1].split("\n")[0]
    assert trail == " → ".join(s.words for s in DEPLOY_PATH[1:-1]) + " → *live*", trail
    # The root never runs ahead of the thread and never goes back either.
    with notifier.uow() as uow:
        root_ts = uow.deployments.get(deployment).slack_thread_ts
    roots = root_steps(stub, root_ts)
    assert all(RANK[a] <= RANK[b] for a, b in itertools.pairwise(roots)), roots
    assert roots[-1] is State.LIVE


def test_progress_edits_are_coalesced_and_an_ending_is_shown_at_once(make_ctx, stub) -> None:
    notifier, deployment = replay(make_ctx, stub, every=3600)
    texts = progress_texts(stub, deployment)
    # Posted once, then within the window only the ending is shown: two versions for eleven state changes.
    assert [shown_step(t) for t in texts] == [State.ARTIFACT_GATE, State.LIVE], [shown_step(t) for t in texts]
    # A running step shows Slack dates (kept current by every client), not a number frozen at the edit.
    assert "this step began <!date^" in texts[0] and "^{ago}|" in texts[0]
    notifier.deliver_pending()  # nothing new: no edit
    assert len(progress_texts(stub, deployment)) == 2
