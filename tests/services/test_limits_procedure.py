"""Accepted limits follow the procedure: never applied over admitted users.

Live on a single node, accepting starts a restore of the same release with the new limits (close → drain →
apply → readiness → evaluation → reopen); while ramping the ramp closes, drains, applies, passes readiness and
starts again from its first step; a pair's idle side takes them at once, a side users are on keeps them.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.adapters.store.models import Deployment
from bot.domain.checks import Check, GateReport
from bot.domain.states import State
from bot.services.deployments import get_deployment
from bot.services.limits_apply import plan_limits
from bot.services.traffic_gate import accept_proposed_limits
from bot.services.transitions import store_gate_report
from tests.services.test_workflow import deploy_to_live
from tests.workflow_support import ADMIN, APPROVER_1, FakeCluster, workflow


@pytest.fixture()
def wf(make_ctx: Any) -> Any:
    return workflow(make_ctx, releases=2)


def propose_limits(ctx: Any, dep_id: int, concurrent: int, queue: int) -> str:
    report = GateReport(gate="traffic", checks=[Check.passed("traffic.sweep", "measured")],
                        attachments={"proposal": {"max_concurrent_requests": concurrent, "max_queue_size": queue}})
    with ctx.uow() as uow:
        row = store_gate_report(uow, ctx, uow.deployments.get(dep_id), report, announce=False)
        uow.commit()
        return str(row.report_hash)


def test_limits_accepted_while_live_go_through_a_restore_behind_a_closed_door(wf: Any) -> None:
    ctx, engine = wf
    live = deploy_to_live(ctx, engine)
    cluster: FakeCluster = ctx.ports.cluster
    applied_before, admission_before = len(cluster.applied), list(cluster.admission)
    accepted = accept_proposed_limits(ctx, None, live.id, ADMIN, seen_report_hash=propose_limits(ctx, live.id, 5, 10))
    # Nothing applied over the users: a restore of the same release will.
    assert accepted.applied_sha256 is None and accepted.restore_id is not None
    assert len(cluster.applied) == applied_before
    assert accepted.how == "close → drain → apply → readiness → evaluation → reopen"
    restore = engine.advance(accepted.restore_id)
    assert restore.state == "live" and restore.release == live.release
    # Closed, then applied, then reopened: the procedure, in that order.
    assert cluster.admission[len(admission_before):] == [False, True]
    assert len(cluster.applied) == applied_before + 1
    with ctx.uow() as uow:
        actions = [a.action for a in reversed(uow.audit.list(subject=f"deployment:{restore.id}", limit=100))]
    states = [a.removeprefix("deployment.") for a in actions if a.startswith("deployment.")]
    order = ["closing", "draining", "applying", "readiness", "reopening", "live"]
    assert [s for s in states if s in order] == order
    assert get_deployment(ctx, live.id).state != "live"  # the restore is what runs now


def test_limits_accepted_while_the_ramp_holds_close_drain_apply_pass_readiness_and_ramp_again(make_ctx: Any) -> None:
    from bot.services.deployments import decide_gate
    from bot.services.engine import Engine
    from bot.services.engine.recovery import waits_for_a_person
    from bot.services.ramp_approvals import approve_ramp_step
    from bot.services.releases import register_release
    from tests.workflow_support import ROLES, endpoint_config, fake_ports, release_data

    # The ramp holds before everyone (an approval step): users are admitted, and nobody drives the deployment.
    ctx = make_ctx(endpoints=[endpoint_config(ramp={"approval_steps": [100]})], roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    engine = Engine(ctx, readiness_pause=0)
    view = to_traffic_gate(ctx, engine)
    decide_gate(ctx, view.id, "traffic", "approved", ADMIN, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash)
    assert engine.advance(view.id).state == "ramping"
    cluster: FakeCluster = ctx.ports.cluster
    applied, admission, watches = len(cluster.applied), len(cluster.admission), len(cluster.watched_since)

    accepted = accept_proposed_limits(ctx, None, view.id, ADMIN, seen_report_hash=propose_limits(ctx, view.id, 5, 10))
    # Stored as the next revision, not applied over the users the ramp admitted; the command drives the ramp.
    assert accepted.ramping and accepted.applied_sha256 is None and accepted.drive == view.id
    assert accepted.how == "close → drain → apply → readiness → the ramp again from its first step"
    assert len(cluster.applied) == applied and not waits_for_a_person(ctx, view.id)

    # The drain does not end: users are closed out and nothing is applied; the deployment is left for a takeover.
    ctx.ports.endpoint.drained = False
    assert engine.advance(view.id).state == "ramping"
    assert cluster.admission[admission:] == [False] and len(cluster.applied) == applied
    with ctx.uow() as uow:
        assert uow.endpoints.get("kimi-prod").admission == "closed"
    assert view.id in engine.lapsed()

    # Another process takes it over from its stored state: it drains, applies, watches, runs readiness, and the
    # ramp starts again from its first step (here it holds again before everyone: asked once, still unanswered).
    ctx.ports.endpoint.drained = True
    again = Engine(ctx, readiness_pause=0)
    assert again.resume(view.id).state == "ramping"
    assert cluster.admission[admission:] == [False]  # not closed a second time, not opened before its approval
    assert len(cluster.applied) == applied + 1 and len(cluster.watched_since) == watches + 1
    approve_ramp_step(ctx, view.id, "open", APPROVER_1)
    assert again.advance(view.id).state == "live"
    assert cluster.admission[admission:] == [False, True]
    with ctx.uow() as uow:
        actions = [a.action for a in reversed(uow.audit.list(subject=f"deployment:{view.id}", limit=200))]
        revision = list(uow.manifests.for_deployment(view.id))[-1]
        assert revision.limits["max_concurrent_requests"] == 5
        assert uow.deployments.get(view.id).manifest_hash == revision.sha256
    done = [a for a in actions if a.startswith("limits.") or a == "manifest.revised"]
    assert done == ["manifest.revised", "limits.users_closed", "limits.drained", "limits.applied", "limits.ready"]


def test_a_pairs_idle_side_takes_them_at_once_and_the_side_users_are_on_keeps_them() -> None:
    from bot.config import EndpointSettings

    side = EndpointSettings(name="kimi-blue", route={"gateway": {"name": "gw"}}, pair={"service": "kimi",
                                                                                          "partner": "kimi-green"})
    dep = Deployment(kind="deploy", state=State.LIVE.value, applied_manifest="x", id=1)

    class Row:
        admission = "closed"

    assert plan_limits(dep, Row(), side).how == "apply"  # type: ignore[arg-type]
    Row.admission = "open"
    assert plan_limits(dep, Row(), side).how == "keep"  # type: ignore[arg-type]
    # Ramping, a side is never idle (its users move onto it while the other side has the rest): kept, not applied.
    dep.state = State.RAMPING.value
    for admission in ("closed", "internal", "50%"):
        Row.admission = admission
        plan = plan_limits(dep, Row(), side)  # type: ignore[arg-type]
        assert plan.how == "keep" and "users are on both sides of kimi" in plan.why


def to_traffic_gate(ctx: Any, engine: Any) -> Any:
    from bot.services.deployments import decide_gate, request_deploy
    from tests.workflow_support import APPROVER_1, REQUESTER

    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    while view.pending is not None and view.pending.gate != "traffic":
        decide_gate(ctx, view.id, view.pending.gate, "approved", APPROVER_1, seen_report_hash=view.pending.report_hash,
                    seen_release_hash=view.pending.release_hash)
        view = engine.advance(view.id)
    return view


@pytest.mark.parametrize("ready", [True, False])
def test_limits_applied_at_the_traffic_gate_pass_readiness_again_before_anyone_is_admitted(wf: Any, ready: bool) -> None:
    from bot.services.deployments import decide_gate

    ctx, engine = wf
    view = to_traffic_gate(ctx, engine)
    cluster: FakeCluster = ctx.ports.cluster
    report_hash = propose_limits(ctx, view.id, 5, 10)
    accepted = accept_proposed_limits(ctx, None, view.id, ADMIN, seen_report_hash=report_hash)
    assert accepted.applied_sha256 is not None  # users are closed out: applied at once, as a new revision
    watches, opened = len(cluster.watched_since), cluster.admission.count(True)
    ctx.ports.endpoint.ok = ready  # the restarted model answers, or does not
    decide_gate(ctx, view.id, "traffic", "approved", ADMIN, seen_report_hash=report_hash,
                seen_release_hash=view.pending.release_hash)
    after = engine.advance(view.id)
    # The revision's rollout was watched from its apply, and its readiness ran, before the ramp.
    assert len(cluster.watched_since) == watches + 1
    if ready:
        assert after.state == "live" and cluster.admission.count(True) == opened + 1
    else:
        assert after.state == "failed" and "readiness with the accepted limits" in (after.state_reason or "")
        assert cluster.admission.count(True) == opened  # nobody was let in to the candidate
