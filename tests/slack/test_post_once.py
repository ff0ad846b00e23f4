"""Each message posted once across replicas: a post still on its way to Slack is not posted again elsewhere.

Two notifiers on one database stand for two replicas (what a process knows of its own tries lives in its
``PostOnce``). The Slack stub takes a "slow" post only when the test releases it, so the message is not in the
channel yet while the other replica looks for it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.adapters.clock import FrozenClock
from bot.adapters.slack.identity import web_client
from bot.adapters.slack.notifier import MAX_ATTEMPTS, SlackNotifier
from bot.adapters.slack.once import IN_FLIGHT, PostInFlight, PostOnce
from bot.adapters.store import schema
from bot.bootstrap import build_context
from bot.config import load_settings
from bot.sandbox.slack_stub import SlackStub
from bot.services.deployments import decide_gate, get_deployment, request_deploy
from bot.services.engine import Engine
from bot.services.releases import register_release
from tests.workflow_support import APPROVER_1, REQUESTER, ROLES, endpoint_config, fake_ports, release_data


@pytest.fixture()
def stub():
    with SlackStub() as s:
        yield s


def keyed(key: str) -> Callable[[dict[str, Any]], bool]:
    """Whether a post's parameters carry ``key`` in their metadata (a JSON body, or a form's JSON string)."""
    def match(params: dict[str, Any]) -> bool:
        metadata = params.get("metadata") or {}
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        return (metadata.get("event_payload") or {}).get("key") == key
    return match


def posts_of(stub: SlackStub, key: str) -> list[Any]:
    return [c for c in stub.calls_to("chat.postMessage") if keyed(key)(c.params)]


def replica(ctx: Any, stub: SlackStub) -> PostOnce:
    """One process's poster, on the Web API client production builds (its rate-limit and connection retries)."""
    return PostOnce(web_client("xoxb-t", stub.api_url), ctx.uow, ctx.clock)


def test_a_post_another_replica_is_still_sending_is_not_posted_again(make_ctx, stub) -> None:
    ctx = make_ctx()
    first, second = replica(ctx, stub), replica(ctx, stub)
    slow = stub.slow_next("chat.postMessage")
    sent: dict[str, tuple[str, str]] = {}
    sending = threading.Thread(target=lambda: sent.update(first=first.post("event:7", "C0PROD", "Rollout started")))
    sending.start()
    assert slow.reached.wait(30)  # on its way: Slack has not taken it, so a look in the channel finds nothing
    with pytest.raises(PostInFlight, match="event:7 is being posted by another try"):
        second.post("event:7", "C0PROD", "Rollout started")
    slow.release()
    sending.join(30)
    assert second.post("event:7", "C0PROD", "Rollout started") == sent["first"]  # the first try's message
    assert len(posts_of(stub, "event:7")) == 1
    assert [m.text for m in stub.messages] == ["Rollout started"]


def test_a_claim_left_by_a_replica_that_died_mid_post_is_posted_once_after_the_bound(make_ctx, stub,
                                                                                      clock: FrozenClock) -> None:
    ctx = make_ctx()
    died, other = replica(ctx, stub), replica(ctx, stub)
    stub.drop_next("chat.postMessage")  # the connection breaks before Slack takes the post
    with pytest.raises(Exception):  # noqa: B017 - how the client reports a broken connection is not the point
        died.post("event:8", "C0PROD", "Gate passed")
    assert stub.messages == []
    # Another replica cannot tell that try from one still on its way until no Web API call could last that long.
    with pytest.raises(PostInFlight):
        other.post("event:8", "C0PROD", "Gate passed")
    assert stub.messages == [] and stub.calls_to("conversations.history") == []
    clock.advance(IN_FLIGHT)
    other.post("event:8", "C0PROD", "Gate passed")
    assert len(stub.calls_to("conversations.history")) == 1  # looked for first: the dead try might have posted it
    assert [m.text for m in stub.messages] == ["Gate passed"]
    other.post("event:8", "C0PROD", "Gate passed")  # and once recorded, never again
    assert len(posts_of(stub, "event:8")) == 1


def test_an_expired_claim_is_taken_over_by_one_replica_only(make_ctx, stub, clock: FrozenClock) -> None:
    """Two replicas reach a dead try's claim after the bound: the first takes it over and posts; the other finds
    the claim taken (and young again) and posts nothing, even while the first's post is still on its way."""
    ctx = make_ctx()
    died, taker, late = replica(ctx, stub), replica(ctx, stub), replica(ctx, stub)
    stub.drop_next("chat.postMessage")
    with pytest.raises(Exception):  # noqa: B017
        died.post("event:8", "C0PROD", "Gate passed")
    clock.advance(IN_FLIGHT)
    slow = stub.slow_next("chat.postMessage")
    sending = threading.Thread(target=lambda: taker.post("event:8", "C0PROD", "Gate passed"))
    sending.start()
    assert slow.reached.wait(30)
    with pytest.raises(PostInFlight):
        late.post("event:8", "C0PROD", "Gate passed")
    # The dead try's own process (restarted, or its next pass) no longer holds the claim: it waits too.
    with pytest.raises(PostInFlight):
        died.post("event:8", "C0PROD", "Gate passed")
    slow.release()
    sending.join(30)
    assert not sending.is_alive()
    assert late.post("event:8", "C0PROD", "Gate passed") == died.post("event:8", "C0PROD", "Gate passed")
    assert len(posts_of(stub, "event:8")) == 1


def test_a_long_rate_limit_is_not_waited_out_inside_a_post(make_ctx, stub) -> None:
    """A post's call must end within the in-flight bound: a Retry-After over the cap is Slack's answer, not a wait."""
    ctx = make_ctx()
    poster = replica(ctx, stub)
    stub.rate_limit_next("chat.postMessage", retry_after=600)
    with pytest.raises(SlackApiError) as refused:
        poster.post("event:10", "C0PROD", "Ramp at 50 %")
    assert refused.value.response["error"] == "ratelimited"
    # Answered 429 once and not tried again: no 600 s wait inside the call.
    assert len(stub.calls_to("ratelimited:chat.postMessage")) == 1 and stub.calls_to("chat.postMessage") == []
    stub.rate_limit_next("chat.postMessage", retry_after=1)  # a short wait is waited out, within the call
    poster.post("event:10", "C0PROD", "Ramp at 50 %")  # refused before, so released: posted without a look
    assert len(stub.calls_to("ratelimited:chat.postMessage")) == 2
    assert [m.text for m in stub.messages] == ["Ramp at 50 %"] and stub.calls_to("conversations.history") == []


@pytest.mark.parametrize(("error", "looked"), [("channel_not_found", 0), ("internal_error", 1)])
def test_after_slacks_refusal_the_retry_posts_at_once_and_after_a_server_error_it_looks_first(
        make_ctx, stub, error: str, looked: int) -> None:
    """A refusal means nothing was posted. After internal_error Slack may have posted it anyway, as its docs warn."""
    ctx = make_ctx()
    poster = replica(ctx, stub)
    stub.fail_next("chat.postMessage", error)
    with pytest.raises(SlackApiError):
        poster.post("event:11", "C0PROD", "Drain stalled")
    poster.post("event:11", "C0PROD", "Drain stalled")
    assert len(stub.calls_to("conversations.history")) == looked
    assert [m.text for m in stub.messages] == ["Drain stalled"]


def test_a_replicas_own_try_whose_answer_was_lost_is_looked_for_at_once(make_ctx, stub) -> None:
    ctx = make_ctx()
    poster = replica(ctx, stub)
    stub.lose_answer_next("chat.postMessage")  # Slack takes it; the answer never comes back
    with pytest.raises(Exception):  # noqa: B017
        poster.post("event:9", "C0PROD", "Draining")
    poster.post("event:9", "C0PROD", "Draining")  # its own try has ended: no wait, it looks and finds it
    assert len(posts_of(stub, "event:9")) == 1 and [m.text for m in stub.messages] == ["Draining"]


def first_replica_slow_on(ctx: Any, stub: SlackStub, engine: Engine,
                          message: str) -> tuple[Any, SlackNotifier, Any, threading.Thread]:
    """A deploy waiting at its first gate, and two replicas' notifiers: the first delivers its events on a thread of
    its own, its post of ``message`` (``progress``, ``deployment``: the key's kind) on its way to Slack, held there.
    The deployment's view, the second notifier, the hold and the first's thread."""
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    view = engine.advance(request_deploy(ctx, "rel-a", None, REQUESTER).id)
    first, second = (SlackNotifier(WebClient(token="xoxb-t", base_url=stub.api_url), ctx.uow, ctx.clock)
                     for _ in range(2))
    slow = stub.slow_next("chat.postMessage", keyed(f"{message}:{view.id}"))
    delivering = threading.Thread(target=first.deliver_pending)
    delivering.start()
    assert slow.reached.wait(30)
    return view, second, slow, delivering


def test_two_replicas_showing_one_deployment_post_its_progress_message_once(make_ctx, stub) -> None:
    """One replica's post of the progress message is slow; meanwhile the other delivers the deployment's next
    events and shows its progress too. The thread keeps one progress message, edited to the newest step."""
    ctx = make_ctx(endpoints=[endpoint_config(channel="C0PROD")], roles=ROLES, ports=fake_ports())
    engine = Engine(ctx, readiness_pause=0)
    view, second, slow, delivering = first_replica_slow_on(ctx, stub, engine, "progress")
    assert view.pending is not None
    decide_gate(ctx, view.id, view.pending.gate, "approved", APPROVER_1,
                seen_report_hash=view.pending.report_hash, seen_release_hash=view.pending.release_hash)
    view = engine.advance(view.id)  # the infrastructure gate waits now: new events in the outbox
    assert second.deliver_pending() > 0
    assert posts_of(stub, f"progress:{view.id}") == []  # the second posted none: the first's is still on its way
    assert len(posts_of(stub, "gate:2")) == 1  # and the rest of the thread did not wait for it
    slow.release()
    delivering.join(30)
    second.deliver_pending()  # a later pass: the message is posted now, so it is edited in place
    assert len(posts_of(stub, f"progress:{view.id}")) == 1
    progress = [m for m in stub.messages if keyed(f"progress:{view.id}")({"metadata": m.metadata})]
    assert len(progress) == 1 and progress[0].updated >= 1
    assert get_deployment(ctx, view.id).state == "infrastructure_gate"
    assert "infrastructure gate" in progress[0].text


def test_an_event_waiting_on_another_replicas_post_is_not_counted_as_a_failed_attempt(tmp_path, clock, stub) -> None:
    """The first replica's post of the thread's root is slow; the second replica's passes meanwhile leave the
    deployment's events for later without spending their attempts (five would give them up), then send them once.
    Replicas on one SQLite file: there both reach the same event (on PostgreSQL its row lock makes the second wait)."""
    path = tmp_path / "kimi.db"
    schema.new_sqlite_at_head(path)
    ctx = build_context(load_settings(database_url=f"sqlite:///{path}", data_dir=tmp_path,
                                      endpoints=[endpoint_config(channel="C0PROD")], roles=ROLES),
                        clock=clock, ports=fake_ports())
    try:
        _wait_without_attempts(ctx, stub)
    finally:
        ctx.close()


def _wait_without_attempts(ctx: Any, stub: SlackStub) -> None:
    view, second, slow, delivering = first_replica_slow_on(ctx, stub, Engine(ctx, readiness_pause=0), "deployment")
    for _ in range(MAX_ATTEMPTS + 1):
        assert second.deliver_pending() == 0
    with ctx.uow() as uow:
        waiting = uow.events.for_deployment(view.id)
        assert waiting and all(e.delivered_at is None for e in waiting)
        assert all(e.attempts == 0 for e in waiting)
    slow.release()
    delivering.join(30)
    assert not delivering.is_alive()
    second.deliver_pending()
    with ctx.uow() as uow:
        assert all(e.delivered_at is not None for e in uow.events.for_deployment(view.id))
    assert len(posts_of(stub, f"deployment:{view.id}")) == 1 and len(posts_of(stub, "gate:1")) == 1
