"""Accepted limits follow the procedure: never applied over admitted users.

Live on a single node, accepting starts a restore of the same release with the new limits (close → drain →
apply → readiness → evaluation → reopen); while ramping it is refused; a pair's idle side takes them at once.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.adapters.store.models import Deployment
from bot.domain.checks import Check, GateReport
from bot.domain.states import State
from bot.services.deployments import get_deployment
from bot.services.errors import Refused
from bot.services.limits_apply import plan_limits
from bot.services.traffic_gate import accept_proposed_limits
from bot.services.transitions import store_gate_report
from tests.services.test_workflow import deploy_to_live
from tests.workflow_support import ADMIN, FakeCluster, workflow


@pytest.fixture()
def wf(make_ctx: Any) -> Any:
    return workflow(make_ctx, releases=2)


def _propose(ctx: Any, dep_id: int, concurrent: int, queue: int) -> str:
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
    accepted = accept_proposed_limits(ctx, None, live.id, ADMIN, seen_report_hash=_propose(ctx, live.id, 5, 10))
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


def test_limits_accepted_while_ramping_are_refused_and_change_nothing(wf: Any) -> None:
    ctx, engine = wf
    live = deploy_to_live(ctx, engine)
    with ctx.uow() as uow:
        dep = uow.deployments.get_for_update(live.id)
        dep.state = State.RAMPING.value  # as it stood a step before going live
        uow.commit()
    with pytest.raises(Refused, match="is ramping: users are admitted to it"):
        accept_proposed_limits(ctx, None, live.id, ADMIN, seen_report_hash=_propose(ctx, live.id, 5, 10))
    with ctx.uow() as uow:
        assert (uow.endpoints.get("kimi-prod").settings or {}).get("accepted_request_limits") is None


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


def _to_traffic_gate(ctx: Any, engine: Any) -> Any:
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
    view = _to_traffic_gate(ctx, engine)
    cluster: FakeCluster = ctx.ports.cluster
    report_hash = _propose(ctx, view.id, 5, 10)
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
