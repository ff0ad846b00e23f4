"""Rollback and restore in the gated workflow: the previous manifest back byte for byte, after every ending past the
apply; users closed out and drained before the candidate is applied; a drain that never ends. Each rule has a test
that fails if the rule is removed.
"""

from __future__ import annotations

import pytest

from bot.services.deployments import (
    cancel,
    decide_gate,
    get_deployment,
    request_deploy,
    request_rollback,
)
from bot.services.errors import Forbidden, Invalid, Refused
from tests.workflow_support import (
    ADMIN,
    APPROVER_1,
    REQUESTER,
    STRANGER,
    approve,
    deploy_to_live,
)
from tests.workflow_support import wf as wf


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
    assert cluster.admission[-2:] == [False, True]  # closed for the rollback, reopened after its readiness
    assert get_deployment(ctx, second.id).state == "superseded"
    with ctx.uow() as uow:
        assert uow.endpoints.get("kimi-prod").admission_open is True
        states = [a.action for a in reversed(uow.audit.list(subject=f"deployment:{view.id}", limit=100))
                  if a.action.startswith("deployment.")]
        # The rollback ran the model gate's evaluation: the next deploy compares against it.
        assert uow.gates.latest(view.id, "model") is not None
    assert states == ["deployment.artifact_gate", "deployment.closing", "deployment.draining", "deployment.applying",
                      "deployment.rolling_out", "deployment.readiness", "deployment.evaluation", "deployment.reopening",
                      "deployment.live"]


def test_rollback_of_a_rollback_needs_an_explicit_release(wf) -> None:
    ctx, engine = wf
    deploy_to_live(ctx, engine, "rel-a")
    deploy_to_live(ctx, engine, "rel-b")
    approve(ctx, engine, engine.advance(request_rollback(ctx, "kimi-prod", REQUESTER).id).id)
    with pytest.raises(Refused) as refused:
        request_rollback(ctx, "kimi-prod", REQUESTER)
    # It names what can actually be restored, as a command to type.
    assert str(refused.value) == ("rel-a on kimi-prod was put back by rollback #3; to go back further, name the release: "
                                  "`/kimi rollback kimi-prod to rel-b`")
    view = engine.advance(request_rollback(ctx, "kimi-prod", REQUESTER, to_release="rel-b").id)
    assert approve(ctx, engine, view.id).release == "rel-b"
    with pytest.raises(Refused, match="never live"):
        request_rollback(ctx, "kimi-prod", REQUESTER, to_release="rel-c")


def test_after_an_automatic_restore_rollback_offers_only_what_can_be_restored(wf) -> None:
    ctx, engine = wf
    deploy_to_live(ctx, engine, "rel-a")
    view = _to_model_gate(ctx, engine)
    view = decide_gate(ctx, view.id, "model", "rejected", APPROVER_1, seen_report_hash=view.pending.report_hash,
                       seen_release_hash=view.pending.release_hash, reason="worse answers")
    engine.advance(view.id)
    restore = _restore_of(ctx, view.id)
    assert restore is not None and restore.state == "live"
    # The deploy that made rel-a live first is superseded by the restore, named as one, of the very same release.
    assert get_deployment(ctx, 1).state_reason == f"superseded by restore #{restore.id}, which runs the same release again"
    # No dead end: not "name a release" followed by a refusal of the only other one.
    with pytest.raises(Refused) as refused:
        request_rollback(ctx, "kimi-prod", REQUESTER)
    assert str(refused.value) == (f"rel-a on kimi-prod was put back by restore #{restore.id}, and no other release was "
                                  "live here before it: there is nothing else to roll back to")
    with pytest.raises(Refused) as named:
        request_rollback(ctx, "kimi-prod", REQUESTER, to_release="rel-b")
    assert str(named.value).endswith("rel-b was never live on kimi-prod; a rollback restores a release that was, "
                                     "and no other release was live here")


def _live_manifest(ctx, deployment_id: int) -> str:
    with ctx.uow() as uow:
        return uow.deployments.get(deployment_id).applied_manifest


def _restore_of(ctx, ended_id: int):
    with ctx.uow() as uow:
        rows = [d for d in uow.deployments.for_endpoint(uow.endpoints.get("kimi-prod").id) if d.cause_id == ended_id]
        return get_deployment(ctx, rows[0].id) if rows else None


def _to_model_gate(ctx, engine, release: str = "rel-b"):
    view = engine.advance(request_deploy(ctx, release, "kimi-prod", REQUESTER).id)
    view = approve(ctx, engine, approve(ctx, engine, view.id).id)
    assert view.state == "model_gate" and view.pending.gate == "model"
    return view


def test_the_candidate_is_applied_only_after_users_are_closed_out_and_drained(wf) -> None:
    ctx, engine = wf
    live = deploy_to_live(ctx, engine, "rel-a")
    cluster = ctx.ports.cluster
    applied_before, admission_before = len(cluster.applied), len(cluster.admission)
    waiting = _to_model_gate(ctx, engine)
    assert cluster.admission[admission_before:] == [False]  # closed before anything was applied, not reopened
    assert len(cluster.applied) == applied_before + 1
    with ctx.uow() as uow:
        assert uow.endpoints.get("kimi-prod").admission == "closed"
        order = [a.action for a in reversed(uow.audit.list(subject=f"deployment:{waiting.id}", limit=100))]
    assert order.index("deployment.draining") < order.index("deployment.applying")
    with ctx.uow() as uow:
        (_, _, applying_at, _), = uow.audit.actions(f"deployment:{waiting.id}", "deployment.applying")
    assert cluster.watched_since[-1] == applying_at  # the rollout watch tells only events since this apply
    assert get_deployment(ctx, live.id).state == "live"  # users still count the previous release as live


@pytest.mark.parametrize("ending", ["reject-model", "reject-traffic", "cancel", "fail-rollout"])
def test_every_ending_after_apply_restores_the_previous_release_byte_for_byte(wf, ending: str) -> None:
    ctx, engine = wf
    live = deploy_to_live(ctx, engine, "rel-a")
    cluster = ctx.ports.cluster
    if ending == "fail-rollout":
        with ctx.uow() as uow:
            cluster.failing.add(uow.releases.get("rel-b").tuple_hash)
        view = approve(ctx, engine, engine.advance(request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER).id).id)
        view = approve(ctx, engine, view.id)
        assert view.state == "failed" and "image pull backoff" in view.state_reason
    else:
        view = _to_model_gate(ctx, engine)
        if ending == "reject-traffic":
            view = approve(ctx, engine, view.id)
        if ending == "cancel":
            view = cancel(ctx, view.id, REQUESTER)
            assert view.state == "cancelled"
        else:
            view = decide_gate(ctx, view.id, view.pending.gate, "rejected", APPROVER_1, seen_report_hash=view.pending.report_hash,
                               seen_release_hash=view.pending.release_hash, reason="worse answers")
            assert view.state == "rejected" and "worse answers" in view.state_reason
        view = engine.advance(view.id)  # drives the restore the ending started
    restore = _restore_of(ctx, view.id)
    assert restore is not None and restore.kind == "restore" and restore.release == "rel-a"
    assert restore.state == "live" and restore.requested_by == "kimi-ops"
    assert cluster.applied[-1] == _live_manifest(ctx, live.id)  # the exact bytes that were live before
    assert cluster.admission[-2:] == [False, True]  # users stayed closed out until the restore's readiness passed
    with ctx.uow() as uow:
        endpoint = uow.endpoints.get("kimi-prod")
        assert endpoint.admission == "open" and uow.deployments.in_flight(endpoint.id) is None
        assert uow.gates.latest(restore.id, "model") is not None  # the restore's evaluation is the next baseline


def test_a_deploy_with_nothing_to_restore_leaves_users_closed_out_and_pages(wf) -> None:
    ctx, engine = wf
    ctx.ports.endpoint.ok = False
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    view = approve(ctx, engine, approve(ctx, engine, view.id).id)
    assert view.state == "failed" and "HTTP 500: engine dead" in view.state_reason
    with ctx.uow() as uow:
        endpoint = uow.endpoints.get("kimi-prod")
        assert [r.ok for r in uow.readiness.recent(endpoint.id)] == [False, False, False]
        assert endpoint.admission == "closed"
        incident = uow.incidents.open_for(endpoint.id, "admission-stuck")
        assert incident is not None and "no earlier live release" in incident.reason
        assert "admission.stuck" in [e.kind for e in uow.events.undelivered(limit=100)]


def test_a_restore_is_not_cancelled_by_a_person_but_an_admin_can_break_it(wf) -> None:
    ctx, engine = wf
    deploy_to_live(ctx, engine, "rel-a")
    view = _to_model_gate(ctx, engine)
    ended = decide_gate(ctx, view.id, "model", "rejected", APPROVER_1, seen_report_hash=view.pending.report_hash,
                        seen_release_hash=view.pending.release_hash, reason="no")
    restore = _restore_of(ctx, ended.id)
    assert restore is not None and restore.state == "requested"  # in the same transaction as the rejection
    with pytest.raises(Refused, match="cannot be cancelled"):
        cancel(ctx, restore.id, REQUESTER)
    broken = cancel(ctx, restore.id, ADMIN, force=True)
    assert broken.state == "interrupted"
    with ctx.uow() as uow:
        assert uow.incidents.open_for(uow.endpoints.get("kimi-prod").id, "admission-stuck") is not None


def test_a_restore_whose_drain_never_ends_gives_its_thread_back_and_a_later_round_carries_on(wf) -> None:
    ctx, engine = wf
    live = deploy_to_live(ctx, engine, "rel-a")
    view = _to_model_gate(ctx, engine)
    ctx.ports.endpoint.drained = False  # requests keep running on the candidate, round after round
    ended = decide_gate(ctx, view.id, "model", "rejected", APPROVER_1, seen_report_hash=view.pending.report_hash,
                        seen_release_hash=view.pending.release_hash, reason="no")
    applied = len(ctx.ports.cluster.applied)

    # The ended deploy drives its restore: the drain does not end, and advance returns (it once looped forever).
    assert engine.advance(ended.id).state == "rejected"
    restore = _restore_of(ctx, ended.id)
    assert restore.state == "draining" and len(ctx.ports.cluster.applied) == applied  # nothing applied over requests
    assert restore.id in engine.lapsed()  # its lease was let go: the next takeover round picks it up
    assert engine.resume(restore.id).state == "draining"  # a round while requests still run: the same, at once
    with ctx.uow() as uow:
        endpoint = uow.endpoints.get("kimi-prod")
        incident = uow.incidents.open_for(endpoint.id, "admission-stuck")
        paged = incident is not None and f"restore #{restore.id} has not drained" in incident.reason
        said = [e.payload["message"] for e in uow.events.for_deployment(restore.id) if e.kind == "rollout.progress"]
    assert paged
    assert len([m for m in said if m.startswith("still draining")]) == 1  # said once, not at every round

    ctx.ports.endpoint.drained = True  # the last request finished
    resumed = engine.resume(restore.id)  # the next takeover round
    assert resumed.state == "live", resumed.state_reason
    assert ctx.ports.cluster.applied[-1] == _live_manifest(ctx, live.id)
    with ctx.uow() as uow:
        assert uow.incidents.open_for(uow.endpoints.get("kimi-prod").id, "admission-stuck") is None


def test_a_drain_past_its_deadline_applies_nothing_and_waits_for_a_person(wf) -> None:
    from bot.services.deployments import decide_drain

    ctx, engine = wf
    deploy_to_live(ctx, engine, "rel-a")
    cluster, endpoint = ctx.ports.cluster, ctx.ports.endpoint
    applied = len(cluster.applied)
    endpoint.drained = False
    view = engine.advance(request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER).id)
    view = approve(ctx, engine, approve(ctx, engine, view.id).id)
    assert view.state == "drain_stalled" and "nothing applied" in view.state_reason
    assert len(cluster.applied) == applied
    with pytest.raises(Forbidden):
        decide_drain(ctx, view.id, "wait", STRANGER)
    view = engine.advance(decide_drain(ctx, view.id, "wait", APPROVER_1).id)
    assert view.state == "drain_stalled" and len(cluster.applied) == applied  # still running: still nothing applied
    view = engine.advance(decide_drain(ctx, view.id, "abort", APPROVER_1).id)
    assert view.state == "cancelled" and "drain aborted" in view.state_reason
    assert len(cluster.applied) == applied and cluster.admission[-2:] == [False, True]
    endpoint.drained = True
    assert request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER).state == "requested"


def test_an_admin_reopens_admission_by_hand_with_a_reason_and_the_page_ends(wf) -> None:
    from bot.services.admission import override_admission

    ctx, engine = wf
    ctx.ports.endpoint.ok = False
    engine.advance(approve(ctx, engine, approve(ctx, engine, engine.advance(
        request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id).id).id).id)
    with pytest.raises(Forbidden):
        override_admission(ctx, "kimi-prod", "open", "users need it", APPROVER_1)
    with pytest.raises(Invalid, match="say why"):
        override_admission(ctx, "kimi-prod", "open", " ", ADMIN)
    view = override_admission(ctx, "kimi-prod", "open", "fallback overloaded", ADMIN)
    assert view.admission == "open" and ctx.ports.cluster.admission[-1] is True
    with ctx.uow() as uow:
        endpoint = uow.endpoints.get("kimi-prod")
        assert endpoint.admission == "open" and uow.incidents.open_for(endpoint.id, "admission-stuck") is None
        assert uow.audit.list(subject="endpoint:kimi-prod", limit=5)[0].actor == "U0ADMIN"
