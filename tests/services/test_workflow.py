"""The gated deploy workflow: four gates to live, who may decide and when, one deployment in flight per endpoint.
Each rule has a test that fails if the rule is removed.
"""

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
)
from bot.services.engine import Engine
from bot.services.errors import Forbidden, Refused
from bot.services.readiness import endpoint_status
from bot.services.releases import register_release
from tests.workflow_support import (
    ADMIN,
    APPROVER_1,
    REQUESTER,
    ROLES,
    STRANGER,
    FakeVerifier,
    approve,
    deploy_to_live,
    endpoint_config,
    release_data,
)
from tests.workflow_support import wf as wf


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
    # The rollout's cold start: in the thread, and the last one in the endpoint's status.
    with ctx.uow() as uow:
        said = [e.payload.get("message", "") for e in uow.events.for_deployment(view.id) if e.kind == "rollout.progress"]
    assert any(m.startswith("cold start: image pull 1 min 30 s · weight transfer 13 min 20 s") for m in said)
    [status] = endpoint_status(ctx, "kimi-prod", observe=False)
    assert status.cold_start is not None and status.cold_start.load_s == 300.0


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
    settings = load_settings(database_url=fresh_pg_url, data_dir=tmp_path, endpoints=[endpoint_config()], roles=ROLES)
    ctx = build_context(settings, clock=clock)
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
        check_transition("deploy", "infrastructure_gate", "applying")  # never applied before users are closed out
    with pytest.raises(IllegalTransition):
        check_transition("deploy", "traffic_gate", "live")  # users meet the candidate only through the ramp
    with pytest.raises(IllegalTransition):
        check_transition("rollback", "closing", "live")
    with pytest.raises(IllegalTransition):
        check_transition("restore", "requested", "artifact_gate")
    check_transition("rollback", "artifact_gate", "closing")
    check_transition("restore", "requested", "closing")
