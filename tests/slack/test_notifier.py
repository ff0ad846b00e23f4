"""The outbox notifier against the Slack stub: threads, gate messages, alerts, redelivery and failures."""

from __future__ import annotations

import pytest
from slack_sdk import WebClient

from bot.adapters.slack.identity import GroupDirectory
from bot.adapters.slack.notifier import MAX_ATTEMPTS, SlackNotifier
from bot.domain.checks import Check
from bot.domain.events import ReservationAlert
from bot.sandbox.slack_stub import SlackStub
from bot.services.deployments import request_deploy
from bot.services.engine import Engine
from bot.services.releases import register_release
from tests.slack_support import blocks_text, has_buttons
from tests.workflow_support import (
    REQUESTER,
    ROLES,
    FakeVerifier,
    endpoint_config,
    fake_ports,
    release_data,
)


@pytest.fixture()
def stub():
    with SlackStub(missing_channels={"C0GONE"}, groups={"S0OPS": ["U1", "U2"]}) as s:
        yield s


def setup(make_ctx, channel: str, extra_checks: list[Check] | None = None):
    ctx = make_ctx(endpoints=[endpoint_config(channel=channel)], roles=ROLES,
                   ports=fake_ports(artifacts=FakeVerifier(extra=extra_checks or [])))
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    return ctx


def notifier_for(ctx, stub: SlackStub) -> SlackNotifier:
    return SlackNotifier(WebClient(token="xoxb-t", base_url=stub.api_url), ctx.uow, ctx.clock)


def test_a_deployment_gets_one_thread_and_redelivery_posts_nothing_twice(make_ctx, stub) -> None:
    ctx = setup(make_ctx, "C0PROD")
    view = request_deploy(ctx, "rel-a", None, REQUESTER)
    Engine(ctx, readiness_pause=0).advance(view.id)
    notifier = notifier_for(ctx, stub)
    assert notifier.deliver_pending() > 0
    posted = len(stub.calls_to("chat.postMessage"))
    roots = [m for m in stub.messages if m.thread_ts is None]
    assert len(roots) == 1 and "Deployment #1" in roots[0].text
    gate = next(m for m in stub.messages if "Artifact gate · deployment #1" in blocks_text(m.blocks))
    assert gate.thread_ts == roots[0].ts and has_buttons(gate)
    # A second pass (another replica, a restart) finds nothing left to send.
    with ctx.uow() as uow:
        for event in uow.events.for_deployment(view.id):
            assert event.delivered_at is not None
    assert notifier.deliver_pending() == 0 and len(stub.calls_to("chat.postMessage")) == posted


def test_a_long_report_is_summarised_with_the_rest_in_the_thread(make_ctx, stub) -> None:
    extra = [Check.warned(f"weights.object.{i:03d}", "size matches, no S3 checksum " + "z" * 300) for i in range(150)]
    ctx = setup(make_ctx, "C0PROD", extra)
    view = request_deploy(ctx, "rel-a", None, REQUESTER)
    Engine(ctx, readiness_pause=0).advance(view.id)
    notifier_for(ctx, stub).deliver_pending()
    gate = next(m for m in stub.messages if "Artifact gate · deployment #1" in blocks_text(m.blocks))
    assert len(gate.blocks) <= 50 and has_buttons(gate)
    assert "posted in the thread below" in blocks_text(gate.blocks)
    thread = "\n".join(m.text for m in stub.messages if m.thread_ts == gate.thread_ts)
    assert "weights.object.149" in thread + blocks_text(gate.blocks)


def test_alerts_go_to_the_endpoint_channel(make_ctx, stub) -> None:
    ctx = setup(make_ctx, "C0PROD")
    with ctx.uow() as uow:
        uow.events.emit(ReservationAlert(endpoint_name="kimi-prod", text="training plan kimi ends in 24 h", channel=None,
                                         reservation_id="kimi"), at=ctx.clock.now())
        uow.commit()
    notifier_for(ctx, stub).deliver_pending()
    alert = stub.calls_to("chat.postMessage")[-1].params
    assert alert["channel"] == "C0PROD" and alert["text"] == "training plan kimi ends in 24 h"


def test_an_unreachable_channel_keeps_events_in_order_then_gives_up(make_ctx, stub) -> None:
    ctx = setup(make_ctx, "C0GONE")
    view = request_deploy(ctx, "rel-a", None, REQUESTER)
    Engine(ctx, readiness_pause=0).advance(view.id)
    notifier = notifier_for(ctx, stub)
    assert notifier.deliver_pending() == 0
    with ctx.uow() as uow:
        events = uow.events.for_deployment(view.id)
        assert events[0].attempts == 1 and all(e.delivered_at is None for e in events)
        assert all(e.attempts == 0 for e in events[1:])  # later events wait behind the first
    for _ in range(MAX_ATTEMPTS):
        notifier.deliver_pending()
    with ctx.uow() as uow:
        assert uow.events.for_deployment(view.id)[0].delivered_at is not None  # given up, logged


def test_group_membership_is_read_once_per_ttl_and_unknown_groups_count_as_empty(stub) -> None:
    ticks = [0.0]
    directory = GroupDirectory(WebClient(token="t", base_url=stub.api_url), ["S0OPS", "S0MISSING", "U9"],
                               ttl_seconds=60, monotonic=lambda: ticks[0])
    assert directory.groups_of("U1") == frozenset({"S0OPS"})
    assert directory.groups_of("U3") == frozenset()
    assert len(stub.calls_to("usergroups.users.list")) == 3  # S0OPS once (cached), S0MISSING twice (not cached)
    stub.groups["S0OPS"] = ["U3"]
    ticks[0] = 61
    assert directory.groups_of("U3") == frozenset({"S0OPS"})


def test_two_replicas_delivering_at_once_post_each_message_once(db_url, clock, tmp_path, stub) -> None:
    """On PostgreSQL the event's row lock keeps two replicas from delivering it at once; on one SQLite file, where
    ``FOR UPDATE`` locks nothing, the posts' claims do (``test_post_once.py`` races two replicas on purpose)."""
    import threading

    from bot.bootstrap import build_context
    from bot.config import load_settings

    contexts = [build_context(load_settings(database_url=db_url, data_dir=tmp_path,
                                            endpoints=[endpoint_config(channel="C0PROD")], roles=ROLES),
                              clock=clock, ports=fake_ports()) for _ in range(2)]
    ctx = contexts[0]
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    view = request_deploy(ctx, "rel-a", None, REQUESTER)
    Engine(ctx, readiness_pause=0).advance(view.id)
    first, second = (notifier_for(c, stub) for c in contexts)  # one per replica, each with its own connections
    threads = [threading.Thread(target=n.deliver_pending) for n in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    roots = [m for m in stub.messages if m.thread_ts is None]
    gates = [m for m in stub.messages if "Artifact gate · deployment #1" in blocks_text(m.blocks)]
    assert len(roots) == 1 and len(gates) == 1
    for c in contexts:
        c.close()


def _gate_posts(stub: SlackStub, gate: str = "Artifact", deployment: int = 1) -> list:
    return [m for m in stub.messages if f"{gate} gate · deployment #{deployment}" in blocks_text(m.blocks)]


def _is_gate_message(params: dict) -> bool:
    return "Artifact gate · deployment #1" in (params.get("text") or "")


def test_a_post_whose_answer_was_lost_is_found_in_slack_and_not_posted_again(make_ctx, stub) -> None:
    ctx = setup(make_ctx, "C0PROD")
    view = request_deploy(ctx, "rel-a", None, REQUESTER)
    Engine(ctx, readiness_pause=0).advance(view.id)
    stub.lose_answer_next("chat.postMessage", _is_gate_message)  # Slack takes it; the connection breaks before the answer
    notifier = notifier_for(ctx, stub)
    notifier.deliver_pending()
    assert len(_gate_posts(stub)) == 1
    with ctx.uow() as uow:
        assert any(e.delivered_at is None for e in uow.events.for_deployment(view.id))  # the outcome is unknown: retried
    notifier.deliver_pending()
    gates = _gate_posts(stub)
    assert len(gates) == 1 and has_buttons(gates[0])  # found by its key in the thread, not posted again
    assert len(stub.calls_to("conversations.replies")) == 1
    with ctx.uow() as uow:
        assert all(e.delivered_at is not None for e in uow.events.for_deployment(view.id))
        assert uow.gates.latest(view.id, "artifact").slack_ts == gates[0].ts  # its Approve/Reject edits go there


def test_a_delivery_failing_after_slack_took_the_message_posts_it_once_and_moves_on(fresh_pg_url, clock, tmp_path,
                                                                                      stub) -> None:
    """The database connection of the delivery is cut while Slack answers the gate message's post."""
    import threading

    from sqlalchemy import create_engine, text

    from bot.adapters.store import schema
    from bot.bootstrap import build_context
    from bot.config import load_settings

    schema.upgrade(fresh_pg_url)
    ctx = build_context(load_settings(database_url=fresh_pg_url, data_dir=tmp_path,
                                      endpoints=[endpoint_config(channel="C0PROD")], roles=ROLES),
                        clock=clock, ports=fake_ports())
    admin = create_engine(fresh_pg_url, isolation_level="AUTOCOMMIT")
    try:
        register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
        view = request_deploy(ctx, "rel-a", None, REQUESTER)
        Engine(ctx, readiness_pause=0).advance(view.id)
        held = stub.hold_next("chat.postMessage", _is_gate_message)
        notifier = notifier_for(ctx, stub)
        failures: list[BaseException] = []

        def deliver() -> None:
            try:
                notifier.deliver_pending()
            except Exception as exc:  # how the delivery reports it is not the point; what Slack shows is
                failures.append(exc)

        first = threading.Thread(target=deliver)
        first.start()
        assert held.reached.wait(30)
        with admin.connect() as conn:  # the delivery's transaction (holding the event's row lock) loses its connection
            cut = conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                                    "current_database() AND state = 'idle in transaction'")).all()
        assert len(cut) == 1
        held.release()
        first.join(60)
        notifier.deliver_pending()
        gates = _gate_posts(stub)
        assert len(gates) == 1 and has_buttons(gates[0])
        assert len([m for m in stub.messages if m.thread_ts is None]) == 1
        with ctx.uow() as uow:
            events = uow.events.for_deployment(view.id)
            assert all(e.delivered_at is not None for e in events)
            assert [e.attempts for e in events if e.kind == "gate.waiting"] == [2]  # the failed try counted too
            assert uow.gates.latest(view.id, "artifact").slack_ts == gates[0].ts
    finally:
        admin.dispose()
        ctx.close()


def test_an_upload_whose_answer_was_lost_is_found_in_the_thread_and_not_uploaded_again(make_ctx, stub) -> None:
    from bot.domain.checks import GateReport
    from bot.services.transitions import store_gate_report

    ctx = setup(make_ctx, "C0PROD")
    view = request_deploy(ctx, "rel-a", None, REQUESTER)
    evaluation = {"release": "rel-a", "summary": {"kinds": {"coding": {"passed": 1, "total": 1, "pass_rate": 1.0}},
                                                  "latency_p50_ms": 800.0, "latency_p95_ms": 2400.0}}
    with ctx.uow() as uow:
        store_gate_report(uow, ctx, uow.deployments.get(view.id),
                          GateReport(gate="model", checks=[Check.passed("model.coding", "1/1")],
                                     attachments={"evaluation": evaluation}))
        uow.commit()
    stub.lose_answer_next("files.completeUploadExternal")  # the file is shared in the thread; the answer never comes
    notifier = notifier_for(ctx, stub)
    notifier.deliver_pending()
    notifier.deliver_pending()
    # Named after the endpoint and release: a plot saved from Slack still says whose it is.
    assert [m.files[0]["name"] for m, _ in stub.files_in("C0PROD")] == [f"{view.endpoint}-rel-a-model-pass-rates.png"]
    assert len(stub.calls_to("files.completeUploadExternal")) == 1
    with ctx.uow() as uow:
        assert all(e.delivered_at is not None for e in uow.events.for_deployment(view.id))


def test_a_deploy_thread_is_its_root_one_progress_message_and_one_message_per_gate(make_ctx, stub) -> None:
    from bot.services.deployments import decide_gate, get_deployment
    from tests.workflow_support import ADMIN, APPROVER_1

    ctx = make_ctx(endpoints=[endpoint_config(channel="C0PROD", approver_group="S0OPS")], roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    engine, notifier = Engine(ctx, readiness_pause=0), notifier_for(ctx, stub)
    view = engine.advance(request_deploy(ctx, "rel-a", None, REQUESTER).id)
    notifier.deliver_pending()
    gates = 0
    while view.state != "live":
        assert view.pending is not None, view
        gates += 1
        decide_gate(ctx, view.id, view.pending.gate, "approved", APPROVER_1 if gates % 2 else ADMIN,
                    seen_report_hash=view.pending.report_hash, seen_release_hash=view.pending.release_hash)
        view = engine.advance(view.id)
        notifier.deliver_pending()
    assert gates == 4 and get_deployment(ctx, view.id).state == "live"
    keys = [c.params["metadata"]["event_payload"]["key"] for c in stub.calls_to("chat.postMessage")]
    # Every rollout event and state change edited one message in place instead of adding a post of its own.
    # (The ramp keeps one message of its own, edited the same way.)
    assert sorted(keys) == sorted(["deployment:1", "progress:1", "ramp:1", *(f"gate:{i}" for i in range(1, 5))]), keys
    progress = next(m for m in stub.messages if (m.metadata or {}).get("event_payload", {}).get("key") == "progress:1")
    # Edited in place, coalesced (at most once every few seconds, the ending at once): it ends saying so.
    assert progress.updated >= 1 and "ended: live" in progress.text and "after it was requested" in progress.text
    assert "*steps:* artifact gate → infrastructure gate → closing" in progress.text
    # The approvers' group is mentioned once, in each gate message as posted; the requester is told who decides.
    first_gate = next(c for c in stub.calls_to("chat.postMessage") if c.params["metadata"]["event_payload"]["key"] == "gate:1")
    said = first_gate.params["text"]
    assert "Waiting for <!subteam^S0OPS> to approve or reject. <@U0DEPLOYER>: they can decide (not you" in said
