"""The apply steps: apply the stored manifest, watch its rollout, pass the readiness suite, record an evaluation.

The manifest is stored before it is applied, so a resumed apply re-applies exactly it, and a deployment found
rolling out after a crash is re-attached to its rollout watch, not re-applied. A deploy's readiness sets the
closed-door baseline: from then on every request the candidate finishes beyond kimi-ops's own is a user's.
"""

from __future__ import annotations

import time

from bot.adapters.store.models import ReadinessCheck
from bot.domain.chat_text import literal
from bot.domain.coldstart import ColdStart
from bot.domain.events import RolloutProgress as RolloutProgressEvent
from bot.domain.readiness import ReadinessResult
from bot.domain.rollout import RenderedManifest
from bot.domain.states import State, next_state
from bot.services.context import require
from bot.services.deployments import endpoint_row
from bot.services.engine.run import READINESS_ATTEMPTS, Runner, Snapshot, StateMoved, StepFailed
from bot.services.gates import run_gate
from bot.services.ports import StartupReader
from bot.services.transitions import store_gate_report, transition


def apply(runner: Runner, snap: Snapshot) -> None:
    cluster = require(runner.ctx.ports.cluster, "cluster access")
    manifest = _render(runner, snap)
    try:
        result = cluster.apply(snap.endpoint, manifest)
    except Exception as exc:
        raise StepFailed(f"apply failed: {exc}") from exc
    if result.conflicts:
        raise StepFailed("apply refused, fields are owned by another manager: " + "; ".join(result.conflicts[:5]))
    runner.move(snap, State.ROLLING_OUT, f"applied manifest {manifest.sha256[:12]}",
                manifest_hash=manifest.sha256, changed=result.changed)


def _render(runner: Runner, snap: Snapshot) -> RenderedManifest:
    cluster = require(runner.ctx.ports.cluster, "cluster access")
    if snap.applied_manifest is not None:
        return RenderedManifest.from_text(snap.applied_manifest)
    if snap.kind == "rollback":
        raise StepFailed("the rollback has no stored manifest to restore")
    try:
        manifest = cluster.render(snap.subject.release, snap.endpoint, snap.subject.release_hash)
    except Exception as exc:
        raise StepFailed(f"the manifest could not be rendered: {exc}") from exc
    # Stored before it is applied: after a crash we re-apply exactly this, never a fresh render.
    with runner.ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        dep.applied_manifest, dep.manifest_hash = manifest.text, manifest.sha256
        uow.audit.record(at=runner.ctx.clock.now(), actor="kimi-ops", action="manifest.rendered",
                         subject=f"deployment:{dep.id}", details={"sha256": manifest.sha256})
        uow.commit()
    return manifest


def rollout(runner: Runner, snap: Snapshot) -> None:
    ctx = runner.ctx
    cluster = require(ctx.ports.cluster, "cluster access")
    if snap.applied_manifest is None:
        raise StepFailed("no applied manifest is stored for this rollout")
    manifest = RenderedManifest.from_text(snap.applied_manifest)
    elapsed = max(0.0, ctx.clock.now().timestamp() - snap.entered_at_epoch)
    remaining = max(1.0, snap.endpoint.max_deploy_seconds - elapsed)
    with ctx.uow() as uow:
        # This deployment's apply began when it entered `applying` (the latest time, after a resumed apply):
        # events older than that are an earlier deployment's pods, named after the same endpoint.
        applying = uow.audit.actions(f"deployment:{snap.id}", f"deployment.{State.APPLYING.value}")
    since = applying[0][2] if applying else None
    with runner.stoppable(snap) as stop:
        outcome = cluster.watch(snap.endpoint, manifest, timeout_seconds=remaining,
                                on_progress=lambda p: runner.progress(snap, p), stop=stop, since=since)
    if outcome.status == "succeeded":
        runner.move(snap, State.READINESS, outcome.reason, rollout_seconds=round(outcome.elapsed_seconds, 1))
    elif outcome.status == "stopped":
        raise StateMoved("rollout watch stopped")
    else:
        raise StepFailed(f"rollout {outcome.status.replace('_', ' ')}: {outcome.reason}")


def readiness(runner: Runner, snap: Snapshot) -> None:
    ctx = runner.ctx
    client = require(ctx.ports.endpoint, "endpoint access")
    result: ReadinessResult | None = None
    for attempt in range(READINESS_ATTEMPTS):
        result = client.readiness(snap.endpoint)
        _record_readiness(runner, snap, result)
        if result.ok:
            break
        if attempt + 1 < READINESS_ATTEMPTS:
            time.sleep(runner.readiness_pause)
    assert result is not None
    if not result.ok:
        raise StepFailed(f"readiness completion {result.summary}")
    baseline = runner.metrics(snap) if snap.kind == "deploy" else None
    cold = _cold_start(runner, snap, result)
    with ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        # From here on, every request the candidate finishes beyond kimi-ops's own is a user getting through.
        dep.closed_baseline = baseline.requests_finished if baseline is not None else None
        dep.own_requests = dep.own_uncertain = 0
        if cold is not None:
            # Kept on the endpoint too: status shows the last one without searching years of events for it.
            dep.endpoint.cold_start, dep.endpoint.cold_start_at = cold.as_dict(), ctx.clock.now()
            uow.events.emit(RolloutProgressEvent(deployment_id=snap.id, endpoint_name=snap.endpoint.name,
                                                 message=f"cold start: {cold.words()}", state=State.READINESS.value),
                            at=ctx.clock.now())
        transition(uow, ctx, dep, next_state(snap.kind, State.READINESS),
                   reason=f"readiness completion {result.summary}",
                   details={"ttft_ms": result.ttft_ms, "total_ms": result.total_ms,
                            **({"cold_start": cold.as_dict()} if cold is not None else {})})
        uow.commit()


def _cold_start(runner: Runner, snap: Snapshot, result: ReadinessResult) -> ColdStart | None:
    """Image pull, weight transfer, load and the first completion of this rollout, where the cluster says."""
    cluster: object = runner.ctx.ports.cluster
    if not isinstance(cluster, StartupReader):
        return None
    first = result.total_ms / 1000 if result.total_ms is not None else None
    return cluster.cold_start(snap.endpoint, first)


def _record_readiness(runner: Runner, snap: Snapshot, result: ReadinessResult) -> None:
    ctx = runner.ctx
    with ctx.uow() as uow:
        endpoint = endpoint_row(uow, snap.endpoint.name)
        now = ctx.clock.now()
        uow.readiness.add(ReadinessCheck(
            endpoint_id=endpoint.id, at=now, ok=result.ok, http_status=result.http_status, ttft_ms=result.ttft_ms,
            total_ms=result.total_ms, failure_kind=result.failure_kind, error=result.error,
        ))
        uow.events.emit(RolloutProgressEvent(deployment_id=snap.id, endpoint_name=snap.endpoint.name,
                                             message=f"readiness completion {literal(result.summary)}",  # the endpoint's words
                                             state=State.READINESS.value), at=now)
        uow.commit()


def evaluation(runner: Runner, snap: Snapshot) -> None:
    """A rollback or restore runs the model gate's evaluation: the next deploy compares against a fresh baseline."""
    ctx = runner.ctx
    report = run_gate(ctx, "model", snap.subject)
    note = "" if report.approvable else "; the evaluation found problems, see its report (the release is restored anyway)"
    with ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        row = store_gate_report(uow, ctx, dep, report, announce=False)
        now = ctx.clock.now()
        # Recorded, not decided: it becomes the next deploy's production baseline; nobody is asked.
        row.decision, row.decided_by, row.decided_at = "approved", "kimi-ops", now
        row.seen = {"report_hash": row.report_hash, "release_hash": snap.subject.release_hash, "auto": True}
        uow.audit.record(at=now, actor="kimi-ops", action="gate.approved", subject=f"deployment:{dep.id}",
                         details={"gate": "model", "auto": True, "why": f"the {snap.kind}'s evaluation is recorded"})
        transition(uow, ctx, dep, State.REOPENING,
                   reason=f"evaluation recorded: {report.summary or report.status}{note}")
        uow.commit()
