"""The gated deploy workflow and rollback: each rule has a test that fails if the rule is removed."""

from __future__ import annotations

import threading

import pytest

from bot.domain.checks import Check
from bot.domain.states import IllegalTransition, check_transition
from bot.services.context import Ports
from bot.services.deployments import (
    cancel,
    decide_gate,
    get_deployment,
    history,
    pending_gates,
    request_deploy,
    request_rollback,
)
from bot.services.engine import Engine
from bot.services.errors import Forbidden, Refused
from bot.services.releases import register_release
from tests.workflow_support import (
    ADMIN,
    APPROVER_1,
    REQUESTER,
    ROLES,
    STRANGER,
    FakeVerifier,
    endpoint_config,
    release_data,
    workflow,
)


@pytest.fixture()
def wf(make_ctx):
    return workflow(make_ctx, releases=3)


def approve(ctx, engine, dep_id, who=APPROVER_1):
    view = get_deployment(ctx, dep_id)
    assert view.pending is not None, view
    decide_gate(ctx, dep_id, view.pending.gate, "approved", who,
                seen_report_hash=view.pending.report_hash, seen_release_hash=view.pending.release_hash)
    return engine.advance(dep_id)


def deploy_to_live(ctx, engine, release="rel-a"):
    view = request_deploy(ctx, release, "kimi-prod", REQUESTER)
    view = engine.advance(view.id)
    gates_seen = []
    while view.state != "live":
        assert view.pending is not None, view
        gates_seen.append(view.pending.gate)
        view = approve(ctx, engine, view.id, APPROVER_1 if len(gates_seen) % 2 else ADMIN)
    assert gates_seen == ["artifact", "infrastructure", "model", "traffic"]
    return view


def test_deploy_runs_four_gates_to_live_with_audit_and_events(wf) -> None:
    ctx, engine = wf
    view = deploy_to_live(ctx, engine)
    assert view.state == "live" and view.manifest_hash
    assert [g.decision for g in view.gates] == ["approved"] * 4
    with ctx.uow() as uow:
        actions = [a.action for a in reversed(uow.audit.list(subject=f"deployment:{view.id}", limit=200))]
        kinds = [e.kind for e in uow.events.for_deployment(view.id)]
    expected_states = ["artifact_gate", "infrastructure_gate", "closing", "draining", "applying", "rolling_out", "readiness",
                       "model_gate", "traffic_gate", "ramping", "live"]
    assert [a.removeprefix("deployment.") for a in actions if a.startswith("deployment.")] == expected_states
    assert kinds.count("deployment.state") == len(expected_states)
    assert kinds.count("gate.waiting") == 4 and kinds.count("gate.decided") == 4
    assert "rollout.progress" in kinds


@pytest.mark.parametrize("gate_index", [0, 1, 2, 3])
def test_each_gate_rejected_ends_the_deployment_and_frees_the_endpoint(wf, gate_index: int) -> None:
    ctx, engine = wf
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    for _ in range(gate_index):
        view = approve(ctx, engine, view.id)
    gate = view.pending.gate
    view = decide_gate(ctx, view.id, gate, "rejected", APPROVER_1, seen_report_hash=view.pending.report_hash,
                       seen_release_hash=view.pending.release_hash, reason="not today")
    assert view.state == "rejected" and "not today" in view.state_reason
    assert engine.advance(view.id).state == "rejected"
    assert request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER).state == "requested"


def test_requester_cannot_approve_their_own_deployment_on_prod(wf, make_ctx) -> None:
    ctx, engine = wf
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", ADMIN).id)
    with pytest.raises(Refused, match="someone else must approve"):
        decide_gate(ctx, view.id, "artifact", "approved", ADMIN, seen_report_hash=view.pending.report_hash,
                    seen_release_hash=view.pending.release_hash)
    assert pending_gates(ctx, ADMIN) == [] and len(pending_gates(ctx, APPROVER_1)) == 1
    with ctx.uow() as uow:
        assert uow.audit.list(limit=1)[0].details["why"] == "self_approval"
    approve(ctx, engine, view.id, APPROVER_1)


def test_self_approval_allowed_where_the_endpoint_says_so(make_ctx) -> None:
    ctx = make_ctx(endpoints=[endpoint_config("kimi-dev", environment="dev")], roles=ROLES, ports=Ports(artifacts=FakeVerifier()))
    register_release(ctx, release_data("rel-a"), "U0ADMIN")
    view = Engine(ctx).advance(request_deploy(ctx, "rel-a", "kimi-dev", ADMIN).id)
    view = decide_gate(ctx, view.id, "artifact", "approved", ADMIN, seen_report_hash=view.pending.report_hash,
                       seen_release_hash=view.pending.release_hash)
    assert view.gates[0].decided_by == "U0ADMIN"


def test_stale_approval_is_refused(wf) -> None:
    ctx, engine = wf
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    old = view.pending
    ctx.ports.artifacts.extra.append(Check.warned("scan", "2 HIGH findings"))
    engine.recheck(view.id, "artifact", REQUESTER)
    with pytest.raises(Refused, match="changed since you looked"):
        decide_gate(ctx, view.id, "artifact", "approved", APPROVER_1, seen_report_hash=old.report_hash,
                    seen_release_hash=old.release_hash)
    with pytest.raises(Refused, match="changed since you looked"):
        decide_gate(ctx, view.id, "artifact", "approved", APPROVER_1,
                    seen_report_hash=get_deployment(ctx, view.id).pending.report_hash, seen_release_hash="0" * 64)
    fresh = get_deployment(ctx, view.id).pending
    assert fresh.report["checks"][-1]["name"] == "scan"
    approve(ctx, engine, view.id)
    with ctx.uow() as uow:
        decided = uow.gates.latest(view.id, "artifact")
        assert decided.seen["report_hash"] == fresh.report_hash and decided.decided_by == "U0APPROVER1"


def test_gate_with_failed_check_cannot_be_approved_only_rejected_or_rechecked(wf) -> None:
    ctx, engine = wf
    ctx.ports.artifacts.extra.append(Check.errored("bucket.posture", "AccessDenied"))
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    with pytest.raises(Refused, match="failed or errored checks"):
        decide_gate(ctx, view.id, "artifact", "approved", APPROVER_1, seen_report_hash=view.pending.report_hash,
                    seen_release_hash=view.pending.release_hash)
    ctx.ports.artifacts.extra.clear()
    engine.recheck(view.id, "artifact", REQUESTER)
    assert approve(ctx, engine, view.id).pending.gate == "infrastructure"


def test_double_click_and_old_messages_change_nothing(wf) -> None:
    ctx, engine = wf
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    first = view.pending
    approve(ctx, engine, view.id)
    with pytest.raises(Refused, match="not waiting"):
        decide_gate(ctx, view.id, "artifact", "approved", APPROVER_1, seen_report_hash=first.report_hash,
                    seen_release_hash=first.release_hash)


def test_only_allowed_people_decide_and_refusals_are_audited(wf) -> None:
    ctx, engine = wf
    with pytest.raises(Forbidden, match="deployer role"):
        request_deploy(ctx, "rel-a", "kimi-prod", STRANGER)
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    with pytest.raises(Forbidden, match="approver role"):
        decide_gate(ctx, view.id, "artifact", "approved", STRANGER, seen_report_hash=view.pending.report_hash,
                    seen_release_hash=view.pending.release_hash)
    with ctx.uow() as uow:
        refusals = [a for a in uow.audit.list() if a.action == "access.refused"]
        assert [r.actor for r in refusals] == ["U0STRANGER", "U0STRANGER"]
    # group membership grants the role
    from bot.services.access import Identity

    approve(ctx, engine, view.id, Identity("U0OTHER", frozenset({"S0APPROVERS"})))


def test_one_deployment_in_flight_per_endpoint_and_cancel_releases_it(wf) -> None:
    ctx, _engine = wf
    first = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER)
    with pytest.raises(Refused, match=rf"deployment #{first.id} .* requested by U0DEPLOYER since"):
        request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER)
    with pytest.raises(Forbidden):
        cancel(ctx, first.id, REQUESTER, force=True)
    assert cancel(ctx, first.id, REQUESTER).state == "cancelled"
    second = request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER)
    broken = cancel(ctx, second.id, ADMIN, force=True)
    assert broken.state == "interrupted" and "lock broken by admin" in broken.state_reason
    with ctx.uow() as uow:
        assert uow.audit.list(subject=f"deployment:{second.id}", limit=1)[0].details["forced"] is True


@pytest.mark.postgres
def test_twenty_concurrent_deploy_requests_produce_exactly_one(fresh_pg_url, clock, tmp_path) -> None:
    from bot.adapters.store import schema
    from bot.bootstrap import build_context
    from bot.config import load_settings

    schema.upgrade(fresh_pg_url)
    ctx = build_context(load_settings(database_url=fresh_pg_url, data_dir=tmp_path, endpoints=[endpoint_config()], roles=ROLES), clock=clock)
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    barrier = threading.Barrier(20)
    outcomes: list[str] = []

    def request() -> None:
        barrier.wait()
        try:
            outcomes.append(f"ok:{request_deploy(ctx, 'rel-a', 'kimi-prod', REQUESTER).id}")
        except Refused as exc:
            outcomes.append(f"refused:{exc}")

    threads = [threading.Thread(target=request) for _ in range(20)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    oks = [o for o in outcomes if o.startswith("ok:")]
    assert len(outcomes) == 20 and len(oks) == 1
    assert all("already has deployment" in o for o in outcomes if o.startswith("refused:"))
    with ctx.uow() as uow:
        assert len(uow.deployments.all_in_flight()) == 1
    ctx.close()


def test_rollback_restores_the_previous_manifest_byte_for_byte(wf) -> None:
    ctx, engine = wf
    first = deploy_to_live(ctx, engine, "rel-a")
    second = deploy_to_live(ctx, engine, "rel-b")
    assert get_deployment(ctx, first.id).state == "superseded"
    cluster = ctx.ports.cluster
    with ctx.uow() as uow:
        first_manifest = uow.deployments.get(first.id).applied_manifest
    view = engine.advance(request_rollback(ctx, "kimi-prod", REQUESTER).id)
    assert view.kind == "rollback" and view.release == "rel-a" and view.pending.gate == "artifact"
    assert [c["name"] for c in view.pending.report["checks"]] == ["weights.objects", "manifest.restore"]
    view = approve(ctx, engine, view.id)
    assert view.state == "live"
    assert cluster.applied[-1] == first_manifest  # the exact bytes applied before
    assert cluster.admission == [False, True]
    assert get_deployment(ctx, second.id).state == "superseded"
    with ctx.uow() as uow:
        assert uow.endpoints.get("kimi-prod").admission_open is True
        states = [a.action for a in reversed(uow.audit.list(subject=f"deployment:{view.id}", limit=100)) if a.action.startswith("deployment.")]
    assert states == ["deployment.artifact_gate", "deployment.close_admission", "deployment.draining", "deployment.applying",
                      "deployment.rolling_out", "deployment.readiness", "deployment.reopen", "deployment.live"]


def test_rollback_of_a_rollback_needs_an_explicit_release(wf) -> None:
    ctx, engine = wf
    deploy_to_live(ctx, engine, "rel-a")
    deploy_to_live(ctx, engine, "rel-b")
    approve(ctx, engine, engine.advance(request_rollback(ctx, "kimi-prod", REQUESTER).id).id)
    with pytest.raises(Refused, match="itself a rollback"):
        request_rollback(ctx, "kimi-prod", REQUESTER)
    view = engine.advance(request_rollback(ctx, "kimi-prod", REQUESTER, to_release="rel-b").id)
    assert approve(ctx, engine, view.id).release == "rel-b"
    with pytest.raises(Refused, match="never live"):
        request_rollback(ctx, "kimi-prod", REQUESTER, to_release="rel-c")


def test_failed_deploy_past_apply_offers_rollback_to_the_live_release(wf) -> None:
    ctx, engine = wf
    live = deploy_to_live(ctx, engine, "rel-a")
    ctx.ports.cluster.outcome = "failed"
    view = engine.advance(request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER).id)
    view = approve(ctx, engine, view.id)
    view = approve(ctx, engine, view.id)
    assert view.state == "failed" and view.rollback_offered and "image pull backoff" in view.state_reason
    ctx.ports.cluster.outcome = "succeeded"
    rollback = engine.advance(request_rollback(ctx, "kimi-prod", REQUESTER).id)
    assert rollback.release == "rel-a"
    assert approve(ctx, engine, rollback.id).state == "live"
    assert get_deployment(ctx, live.id).state == "superseded"


def test_failed_readiness_fails_the_deploy_with_the_reason(wf) -> None:
    ctx, engine = wf
    ctx.ports.endpoint.ok = False
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    view = approve(ctx, engine, approve(ctx, engine, view.id).id) if False else approve(ctx, engine, view.id)
    view = approve(ctx, engine, view.id)
    assert view.state == "failed" and "HTTP 500: engine dead" in view.state_reason and view.rollback_offered
    with ctx.uow() as uow:
        assert [r.ok for r in uow.readiness.recent(uow.endpoints.get("kimi-prod").id)] == [False, False, False]


def test_rollback_offered_is_stored_with_the_failure_not_read_from_its_reason(wf, make_ctx) -> None:
    ctx, engine = wf
    ctx.ports.cluster.outcome = "failed"
    view = approve(ctx, engine, approve(ctx, engine, engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id).id).id)
    assert view.state == "failed" and view.rollback_offered and view.state_reason.endswith("; rollback offered")
    with ctx.uow() as uow:
        row = uow.deployments.get(view.id)
        assert row.rollback_offered is True
        row.state_reason = "image pull backoff"  # the text no longer says it; the stored fact still does
        uow.commit()
    again = get_deployment(make_ctx(endpoints=[endpoint_config()], roles=ROLES), view.id)  # another process, same database
    assert again.rollback_offered and again.state_reason == "image pull backoff"
    # A cancel past apply mentions a rollback in its reason, but only a failure offers one.
    ctx.ports.cluster.outcome = "succeeded"
    waiting = approve(ctx, engine, approve(ctx, engine, engine.advance(request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER).id).id).id)
    assert waiting.state == "model_gate"
    cancelled = cancel(ctx, waiting.id, REQUESTER)
    assert "rollback offered" in cancelled.state_reason and not cancelled.rollback_offered


def test_infrastructure_gate_fails_when_the_reservation_ends_too_soon(wf) -> None:
    import datetime as dt

    ctx, engine = wf
    ctx.ports.reservations.end = ctx.clock.now() + dt.timedelta(hours=3)
    view = approve(ctx, engine, engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id).id)
    checks = {c["name"]: c for c in view.pending.report["checks"]}
    assert checks["reservation.window"]["status"] == "fail"
    assert checks["reservation.instance_type"]["status"] == "pass" and checks["reservation.zone"]["status"] == "pass"


def test_history_lists_outcomes_and_deciders(wf) -> None:
    ctx, engine = wf
    deploy_to_live(ctx, engine, "rel-a")
    rows = history(ctx, "kimi-prod")
    assert rows[0].state == "live" and rows[0].requested_by == "U0DEPLOYER"
    assert {g.decided_by for g in rows[0].gates} == {"U0APPROVER1", "U0ADMIN"}


def test_illegal_transitions_are_refused() -> None:
    with pytest.raises(IllegalTransition):
        check_transition("deploy", "artifact_gate", "applying")
    with pytest.raises(IllegalTransition):
        check_transition("rollback", "close_admission", "live")
    check_transition("rollback", "artifact_gate", "close_admission")
