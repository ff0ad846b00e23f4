"""The traffic gate in Slack: accepting proposed limits with one click, the sweep plot in the thread.

Everything goes through signed requests to the real Bolt app served over HTTP,
the real notifier and the Slack Web API stub; the sweep runs for real against
the local OpenAI-compatible server made to reject past six running requests.
Only the artifact, cluster, readiness and reservation ports are the workflow
doubles, since this file is about the last gate.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bot.adapters.cluster.kube import render_manifest
from bot.adapters.endpoint import HttpEndpointClient
from bot.adapters.endpoint.loadgen import HttpLoadGenerator
from bot.domain.release import ReleaseManifest
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.slack_stub import Message
from bot.services.access import Identity
from bot.services.deployments import endpoint_settings, get_deployment
from bot.services.errors import Refused
from bot.services.releases import register_release
from bot.views.actions import ACCEPT_AND_APPROVE, ACCEPT_LIMITS, APPROVE, APPROVE_ABOVE_LIMITS, REJECT
from tests.slack_support import (
    CHANNEL,
    SlackBench,
    blocks_text,
    button,
    start_bench,
)
from tests.workflow_support import (
    ROLES,
    endpoint_config,
    fake_ports,
    release_data,
)
from tests.world_support import wait_until

# The Slack edge is what is tested here, not the store: SQLite only (tests/conftest.py). Every store line its
# PostgreSQL runs reached, the other PostgreSQL tests reach too (coverage of bot/adapters/store, 5 December).
pytestmark = pytest.mark.sqlite_only

LIMIT = 6  # the server answers 429 past this many running requests: the proposal must follow it
SWEEP = {
    "ceiling": 8, "warmup_requests": 1, "steady_requests_per_slot": 2, "steady_seconds": 20, "burst_rounds": 2,
    "refine_steps": 3, "max_requests": 600, "max_seconds": 60, "request_timeout_seconds": 10,
    "max_tokens": 8, "prompt_words": 48, "prefix_modes": ["unique"],
}
# For the tests that need a proposal below what the endpoint admits but not which: one steady request and one burst
# per level, no bisection (a third of the sweep's time; its knee is at 8 or it proposes the ceiling, 8, both below 32).
ANY_KNEE_SWEEP = {**SWEEP, "steady_requests_per_slot": 1, "burst_rounds": 1, "refine_steps": 0}
APPROVER = "U0APPROVER1"
GROUP_APPROVER = "U0APPROVER2"  # an approver through the S0APPROVERS user group


@pytest.fixture()
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(reply="OK, noted.", first_token_delay=0.1, token_delay=0.005) as srv:
        srv.configure(max_running=LIMIT, max_waiting=0, overflow_status=429)
        yield srv


def _bench(make_ctx: Any, server: OpenAIServer, sweep: dict[str, Any]) -> Iterator[SlackBench]:
    endpoint = endpoint_config(channel=CHANNEL, url=server.url,
                               request_limits={"max_concurrent_requests": 32, "max_queue_size": 64})
    # /metrics read four times a second, not twenty: the knee here is the server's 429s, and no test reads a peak.
    reader = HttpEndpointClient(timeout=5)  # the endpoint port is a double here: this client reads /metrics alone
    loadgen = HttpLoadGenerator(metrics=reader.peak_metrics, metrics_interval=0.25)
    ctx = make_ctx(endpoints=[endpoint], roles=ROLES, traffic_sweep=sweep, traffic_objectives={"ttft_p99_ms": 2000},
                   ports=fake_ports(loadgen=loadgen))
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    # The outbox delivered four times a second between requests, not twenty: each pass is a few queries, and here
    # only the engine's gate runs (on its own thread) write events no request's work delivers at once.
    with start_bench(ctx, groups={"S0APPROVERS": [GROUP_APPROVER]}, readiness_pause=0, outbox_seconds=0.25) as b:
        yield b
    reader.close()


@pytest.fixture()
def bench(make_ctx, server: OpenAIServer) -> Iterator[SlackBench]:
    """The sweep that finds the server's limit exactly on a quiet machine: the proposal is ``LIMIT`` (see :func:`proposed`)."""
    yield from _bench(make_ctx, server, SWEEP)


@pytest.fixture()
def any_knee_bench(make_ctx, server: OpenAIServer) -> Iterator[SlackBench]:
    """A quicker sweep whose proposal is below what the endpoint admits (Accept limits offered), not exactly ``LIMIT``."""
    yield from _bench(make_ctx, server, ANY_KNEE_SWEEP)


def root(bench: SlackBench) -> Message:
    return bench.stub.wait_for(lambda s: next((m for m in s.messages if m.thread_ts is None and m.ephemeral_to is None
                                               and "Deployment #1:" in m.text), None))


def to_traffic_gate(bench: SlackBench) -> Message:
    """``/kimi deploy``, then Approve on the artifact, infrastructure and model gates; the traffic gate's message."""
    bench.slash("U0DEPLOYER", "deploy rel-a to kimi-prod")
    for gate in ("artifact", "infrastructure", "model"):
        message = bench.gate_message(gate, 1)
        bench.click(APPROVER, message, APPROVE)
        bench.stub.wait_for(lambda s, message=message: f"Approved by <@{APPROVER}>" in blocks_text(message.blocks), timeout=90)
    # The sweep takes a while on a busy machine: wait for the message itself (gate_message gives up after 10 s).
    return bench.stub.wait_for(lambda s: next((m for m in s.messages if m.ephemeral_to is None and has(m, ACCEPT_LIMITS)
                                               and "Traffic gate · deployment #1" in blocks_text(m.blocks)), None), timeout=90)


def recheck_once_the_gate_is_free(bench: SlackBench) -> None:
    """Re-check the traffic gate as soon as the run that posted its report has let go of the endpoint.

    The report is posted before that run returns; on a busy machine the recheck can arrive in between and is
    refused as "being worked on right now", which is the engine's rule, not what this test is about.
    """
    def attempt() -> bool:
        try:
            bench.app.root.engine.recheck(1, "traffic", Identity("U0DEPLOYER"))
        except Refused as exc:
            if "being worked on" in str(exc):
                return False
            raise
        return True

    wait_until("the traffic gate free for a recheck", attempt, timeout=180)


def has(message: Message, action_id: str) -> bool:
    return any(e.get("action_id") == action_id for b in message.blocks for e in b.get("elements", []))


def proposed(bench: SlackBench) -> int:
    """The traffic gate's stored proposal for deployment #1 (``maxConcurrentRequests``), never above ``LIMIT``.

    The sweep finds the server's ``LIMIT`` exactly on a quiet machine; a loaded one can meet a 429 a level early. This
    module tests the message and its buttons, so it follows what was proposed; the exact knee is tested in
    tests/services/test_traffic_gate.py.
    """
    pending = get_deployment(bench.app.ctx, 1).pending
    assert pending is not None and pending.gate == "traffic"
    limit = int(pending.report["attachments"]["proposal"]["max_concurrent_requests"])
    assert 0 < limit <= LIMIT
    return limit


def said_to(bench: SlackBench, user: str, words: str) -> Message:
    return bench.stub.wait_for(lambda s: next((m for m in s.seen_by(user) if words in m.text), None), timeout=90)


def accepted_audit(bench: SlackBench) -> list:
    with bench.app.ctx.uow() as uow:
        return [a for a in uow.audit.list(subject="endpoint:kimi-prod", limit=500) if a.action == "endpoint.limits_accepted"]


def rendered_limits(bench: SlackBench) -> dict:
    """``worker.requestLimits`` of the manifest the next deployment of rel-a would apply."""
    release = ReleaseManifest.model_validate(release_data("rel-a"))
    manifest = render_manifest(release, endpoint_settings(bench.app.ctx, "kimi-prod"), "0" * 64)
    (config,) = [o for o in manifest.objects if o["kind"] == "InferenceEndpointConfig"]
    return config["spec"]["worker"]["requestLimits"]


def test_an_approver_accepts_the_proposed_limits_from_the_traffic_gate_message(bench: SlackBench) -> None:
    message = to_traffic_gate(bench)
    limit = proposed(bench)
    text = blocks_text(message.blocks)
    assert f"*Proposed limits:* maxConcurrentRequests {limit}" in text and "now admits 32 concurrent, queue 64" in text
    assert "*Sweep*" in text and "429/503 rate" in text  # the compact sweep table beside the checks
    # A plain Approve would be refused above the measured limits: not offered. The two approvals that can succeed
    # are, and accepting limits alone stays a separate act.
    assert not has(message, APPROVE) and has(message, ACCEPT_AND_APPROVE) and has(message, APPROVE_ABOVE_LIMITS)
    value = button(message, ACCEPT_LIMITS)["value"]
    assert len(value) < 2000
    assert rendered_limits(bench)["maxConcurrentRequests"] == 32

    # A deployer is not an approver: refused in one sentence only they see, audited, nothing changes.
    bench.click("U0DEPLOYER", message, ACCEPT_LIMITS)
    said_to(bench, "U0DEPLOYER", "you need the approver role")
    with bench.app.ctx.uow() as uow:
        refusals = [a for a in uow.audit.list(subject="deployment:1") if a.action == "access.refused"]
        assert refusals and refusals[0].actor == "U0DEPLOYER" and refusals[0].details["wanted"] == "accept_limits"
    assert rendered_limits(bench)["maxConcurrentRequests"] == 32 and not accepted_audit(bench)

    bench.click(GROUP_APPROVER, message, ACCEPT_LIMITS)
    said_to(bench, GROUP_APPROVER, f"You accepted maxConcurrentRequests {limit}")
    bench.stub.wait_for(lambda s: "Limits accepted by" in blocks_text(message.blocks), timeout=90)
    text = blocks_text(message.blocks)
    assert f"Limits accepted by <@{GROUP_APPROVER}> at 2026-" in text and f"maxConcurrentRequests {limit}" in text
    assert "(was 32 / 64)" in text
    # Its limits warning no longer asks for what was just done.
    assert "accept the proposal to lower it" not in text and f"accepted since by <@{GROUP_APPROVER}>" in text
    assert not has(message, ACCEPT_LIMITS) and has(message, APPROVE)  # updated in place, the gate still waits
    assert not has(message, ACCEPT_AND_APPROVE) and not has(message, APPROVE_ABOVE_LIMITS)  # within limits now
    limits = rendered_limits(bench)
    assert limits["maxConcurrentRequests"] == limit
    assert endpoint_settings(bench.app.ctx, "kimi-prod").request_limits.max_concurrent_requests == 32  # YAML untouched
    bench.slash(APPROVER, "status kimi-prod")
    status = bench.stub.wait_for(lambda s: [m for m in s.messages if "*admission:*" in m.text])[-1].text
    assert f"{limit} concurrent" in status and "(accepted from a traffic gate)" in status

    # The same button pressed again (a second tab, a double click): told why, nothing changes.
    bench.post(bench.sender.click(APPROVER, message, ACCEPT_LIMITS, value))
    said_to(bench, APPROVER, f"already accepted by <@{GROUP_APPROVER}>")
    assert len(accepted_audit(bench)) == 1 and rendered_limits(bench) == limits
    assert sum(1 for m in bench.stub.messages if "Traffic gate · deployment #1" in blocks_text(m.blocks)) == 1

    # Deciding the gate afterwards keeps the acceptance on the message.
    bench.click(APPROVER, message, APPROVE)
    bench.stub.wait_for(lambda s: f"Approved by <@{APPROVER}>" in blocks_text(message.blocks), timeout=90)
    assert "Limits accepted by" in blocks_text(message.blocks) and message.blocks[-1]["type"] != "actions"


def test_an_id_typed_after_by_in_a_reason_pings_nobody_while_the_people_who_acted_stay_mentions(
        any_knee_bench: SlackBench) -> None:
    """Mentions come from who the deployment records acting (asked, accepted limits, rejected), not from the words
    around an id: "by U0ADMIN" typed in a rejection reaches Slack as typed, pinging nobody."""
    bench = any_knee_bench
    message = to_traffic_gate(bench)
    bench.click(GROUP_APPROVER, message, ACCEPT_LIMITS)
    bench.stub.wait_for(lambda s: f"accepted since by <@{GROUP_APPROVER}>" in blocks_text(message.blocks), timeout=90)
    bench.click(APPROVER, message, REJECT)
    modal = bench.stub.wait_for(lambda s: s.calls_to("views.open"))[-1].params["view"]
    typed = "knee too low, as measured by U0ADMIN"
    bench.post(bench.sender.submit(APPROVER, modal, {"reason": {"reason": typed}}))
    said = f"traffic gate rejected by <@{APPROVER}>: {typed}"
    bench.stub.wait_for(lambda s: said in root(bench).text and any(said in m.text for m in s.messages), timeout=90)
    text = blocks_text(message.blocks)
    assert f"Rejected by <@{APPROVER}>" in text and f"accepted since by <@{GROUP_APPROVER}>" in text
    assert bench.app.wait_idle(30)
    for call in bench.stub.calls:
        sent = json.dumps(call.params, default=str, ensure_ascii=False)
        assert "<@U0ADMIN>" not in sent and "\u2060" not in sent, (call.method, sent[:600])


def test_a_click_on_a_report_that_was_re_checked_is_refused_as_stale(any_knee_bench: SlackBench) -> None:
    bench = any_knee_bench
    old = to_traffic_gate(bench)
    value = button(old, ACCEPT_LIMITS)["value"]

    recheck_once_the_gate_is_free(bench)
    bench.app.deliver()
    bench.stub.wait_for(lambda s: "Re-checked at" in blocks_text(old.blocks), timeout=90)
    assert not has(old, ACCEPT_LIMITS)  # the superseded report lost its buttons

    bench.post(bench.sender.click(APPROVER, old, ACCEPT_LIMITS, value))
    said_to(bench, APPROVER, "changed since you looked")
    assert not accepted_audit(bench) and rendered_limits(bench)["maxConcurrentRequests"] == 32
    with bench.app.ctx.uow() as uow:
        assert any(a.action == "endpoint.limits_refused" and a.details["why"] == "stale"
                   for a in uow.audit.list(subject="deployment:1"))
    newest = [m for m in bench.stub.messages if "Traffic gate · deployment #1" in blocks_text(m.blocks)][-1]
    assert newest is not old and has(newest, ACCEPT_LIMITS)


def test_the_sweep_plot_lands_in_the_thread_once_even_when_slack_fails_first(any_knee_bench: SlackBench) -> None:
    bench = any_knee_bench
    # The first upload attempt dies at Slack's upload URL, the second when completing: both are retried.
    bench.stub.fail_next("upload")
    bench.stub.fail_next("files.completeUploadExternal", "internal_error")
    to_traffic_gate(bench)
    thread = root(bench)

    files = bench.stub.wait_for(lambda s: s.files_in(CHANNEL, thread.ts), timeout=90)
    (shared, upload), = files
    (file,) = shared.files
    with bench.app.ctx.uow() as uow:
        row = uow.gates.latest(1, "traffic")
        report, gate_id = row.report, row.id
        dep = uow.deployments.get(1)
        named = f"{dep.endpoint.name}-{dep.release.name}-traffic-sweep.png"  # whose plot, when saved from Slack
    assert file["name"] == named and file["mimetype"] == "image/png"
    # Drawn from the stored report's numbers (the report holds no picture), and a copy kept in the data directory.
    assert "plot" not in report["attachments"]
    assert upload.data is not None and upload.data[:8] == b"\x89PNG\r\n\x1a\n"
    kept = bench.app.ctx.settings.data_dir / "reports" / f"gate-{gate_id}-{named}"
    assert upload.data == kept.read_bytes()
    assert len(bench.stub.calls_to("files.getUploadURLExternal")) == 3  # two failures, then the upload that arrived
    # Nothing was posted twice while the upload was retried.
    assert sum(1 for m in bench.stub.messages if "Traffic gate · deployment #1" in blocks_text(m.blocks)) == 1
    bench.app.deliver()
    assert len(bench.stub.files_in(CHANNEL)) == 1


# ---------------------------------------------------------------------------- tables within Block Kit's limits


def test_approving_above_the_measured_limits_is_refused_until_a_reason_is_given_in_its_form(bench: SlackBench) -> None:
    message = to_traffic_gate(bench)
    limit = proposed(bench)
    assert "Approving as it stands goes live above the measured safe concurrency" in blocks_text(message.blocks)

    # Plain Approve is not offered; pressed anyway (an older copy of the message): refused to the clicker alone,
    # naming the proposal, and the shared message is not touched; the gate still waits.
    edits_before = len([c for c in bench.stub.calls_to("chat.update") if c.params.get("ts") == message.ts])
    bench.post(bench.sender.click(APPROVER, message, APPROVE, button(message, ACCEPT_AND_APPROVE)["value"]))
    said_to(bench, APPROVER, f"would go live with 32 concurrent requests admitted, above the measured safe {limit} "
                             f"(proposed maxConcurrentRequests {limit}")
    with bench.app.ctx.uow() as uow:
        assert uow.gates.latest(1, "traffic").decision is None
    assert len([c for c in bench.stub.calls_to("chat.update") if c.params.get("ts") == message.ts]) == edits_before

    # The second button asks why; an empty reason is refused in the form itself.
    bench.click(APPROVER, message, APPROVE_ABOVE_LIMITS)
    view = bench.stub.wait_for(lambda s: s.calls_to("views.open"))[0].params["view"]
    assert view["title"]["text"] == "Approve above limits"
    assert bench.post(bench.sender.submit(APPROVER, view, {"reason": {"reason": " "}})).json()["response_action"] == "errors"
    bench.post(bench.sender.submit(APPROVER, view, {"reason": {"reason": "launch traffic is capped upstream"}}))
    bench.stub.wait_for(lambda s: f"Approved by <@{APPROVER}>" in blocks_text(message.blocks), timeout=90)
    assert "above the measured limits: launch traffic is capped upstream" in blocks_text(message.blocks)
    assert not has(message, APPROVE_ABOVE_LIMITS)
    with bench.app.ctx.uow() as uow:
        seen = uow.gates.latest(1, "traffic").seen
        assert seen["limits_override"]["reason"] == "launch traffic is capped upstream"


def test_accept_limits_and_approve_is_one_press_and_a_refused_one_changes_nothing(bench: SlackBench) -> None:
    message = to_traffic_gate(bench)
    limit = proposed(bench)
    edits = lambda: [c for c in bench.stub.calls_to("chat.update") if c.params.get("ts") == message.ts]  # noqa: E731
    before = len(edits())

    # The requester may neither accept its limits nor approve: told alone, nothing accepted, the message untouched.
    bench.click("U0DEPLOYER", message, ACCEPT_AND_APPROVE)
    said_to(bench, "U0DEPLOYER", "you need the approver role")
    assert not accepted_audit(bench) and len(edits()) == before
    with bench.app.ctx.uow() as uow:
        assert uow.gates.latest(1, "traffic").decision is None

    bench.click(APPROVER, message, ACCEPT_AND_APPROVE)
    said_to(bench, APPROVER, f"You accepted maxConcurrentRequests {limit}")
    bench.stub.wait_for(lambda s: f"Approved by <@{APPROVER}>" in blocks_text(message.blocks), timeout=90)
    text = blocks_text(message.blocks)
    assert "Limits accepted by" in text and "above the measured limits" not in text
    assert rendered_limits(bench)["maxConcurrentRequests"] == limit and len(accepted_audit(bench)) == 1
    # Every edit of the gate message was made after the decision: none shows buttons being taken away and back.
    shown = [blocks_text(c.params.get("blocks") or []) for c in edits()[before:]]
    assert shown and all("Approved by" in t or "Limits accepted by" in t for t in shown)
