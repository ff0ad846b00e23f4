"""Accepted limits carried out by the ramp: a revised manifest passes readiness before any user meets it.

A new limit restarts the model, and a deploy can reach its ramp with a manifest newer than its passed readiness
in two ways (:mod:`bot.services.limits_apply`):

* applied at the traffic gate, while users were closed out: before anyone is admitted, the ramp watches that
  revision's rollout and runs the readiness suite again;
* accepted while ramping on a single node: stored, not applied. The ramp stops where it is (a soak notices at its
  next sample) and carries it out itself: close the route (everyone to the fallback) → drain → apply → watch the
  rollout → readiness, and then the ramp starts again from its first step (the internal cohort).

Each part is recorded in the audit (``limits.users_closed``, ``limits.drained``, ``limits.applied``,
``limits.ready``) in the same transaction as what it changed, so a takeover after a crash continues with the part
that is left (:func:`bot.services.limits_apply.limits_step`). A failure fails the deployment, which restores the
previous release. A drain that does not end applies nothing: the ramp stays closed and the next takeover round
drains again. As after a deploy's first readiness, the closed-door count starts again from the revision's
readiness: the restarted model's finished-request counter starts from zero and holds kimi-ops's own completions.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace

from bot.adapters.store.uow import SqlUnitOfWork
from bot.domain.admission import Admission
from bot.domain.events import RolloutProgress as RolloutProgressEvent
from bot.domain.own_requests import OwnRequests
from bot.domain.rollout import RenderedManifest, RolloutProgress
from bot.domain.states import State
from bot.services.admission import AdmissionFailed, apply_admission, record_admission
from bot.services.context import require
from bot.services.engine.closed_door import StoredLedger
from bot.services.engine.run import READINESS_ATTEMPTS, Runner, Snapshot, StateMoved, StepFailed, TryLater
from bot.services.limits_apply import LIMITS_APPLIED, LIMITS_CLOSED, LIMITS_DRAINED, LIMITS_READY, limits_step


def limits_left(runner: Runner, snap: Snapshot) -> bool:
    """Whether part of an accepted limits' procedure is left for this deployment (the ramp then stops to do it)."""
    with runner.ctx.uow() as uow:
        return limits_step(uow, snap.id) is not None


def limits_first(runner: Runner, snap: Snapshot, *, admitted: bool) -> tuple[Snapshot, bool]:
    """Carry out what is left of the newest revision's procedure; the deployment to ramp with, and whether it ran.

    ``admitted``: the route lets users in at one of the ramp's steps now. A revision applied at the traffic gate is
    only checked while nobody is admitted (one found after its ramp began was recorded before this procedure
    existed, and its users already meet it).
    """
    with runner.ctx.uow() as uow:
        left = limits_step(uow, snap.id)
    if left is None:
        return snap, False
    step, revision = left
    if step == "ready" and admitted:
        _record(runner, snap, LIMITS_READY, revision, None)
        return snap, False
    if step == "close":
        _close(runner, snap, revision)
        step = "drain"
    if step == "drain":
        _drain(runner, snap, revision)
        step = "apply"
    if step == "apply":
        _apply(runner, snap, revision)
    return ready_again(runner, snap, revision), True


def _close(runner: Runner, snap: Snapshot, revision: int) -> None:
    ctx = runner.ctx
    reason = f"closed for {snap.kind} #{snap.id}: applying the accepted limits (manifest revision {revision})"
    try:
        words = apply_admission(ctx, snap.endpoint, Admission.closed(), reason)
    except AdmissionFailed as exc:
        raise StepFailed(str(exc)) from exc
    with ctx.uow() as uow:
        runner.locked(uow, snap)
        record_admission(uow, ctx, snap.endpoint.name, Admission.closed(), reason, actor="kimi-ops",
                         deployment_id=snap.id, words=words)
        _mark(uow, runner, snap, LIMITS_CLOSED, revision,
              f"limits accepted while ramping: the ramp stops and users are closed out ({words}); then drain → apply "
              f"→ readiness, and the ramp starts again from its first step")
        uow.commit()


def _drain(runner: Runner, snap: Snapshot, revision: int) -> None:
    client = require(runner.ctx.ports.endpoint, "endpoint access")
    with runner.stoppable(snap) as stop:  # a cancel elsewhere ends the wait at once (its restore drains again)
        drained, last = client.drain(snap.endpoint, timeout_seconds=snap.endpoint.drain_seconds, stop=stop)
        if not drained and stop.is_set():
            raise StateMoved(f"deployment #{snap.id}: its drain stopped (it moved on elsewhere)")
    if not drained:
        running = f"{(last.running or 0):.0f} running, {(last.waiting or 0):.0f} waiting" if last else "metrics unavailable"
        runner.progress(snap, RolloutProgress(
            f"still draining ({running}) before the accepted limits are applied: nothing is applied while requests run, "
            f"users stay on the fallback, and it drains again every {runner.ctx.settings.lease_takeover_seconds:g} s "
            f"(`/kimi cancel {snap.id}` restores the previous release instead)", State.RAMPING.value))
        raise TryLater(f"deployment #{snap.id} keeps draining before its accepted limits are applied")
    _record(runner, snap, LIMITS_DRAINED, revision, "drained: no running or waiting requests")


def _apply(runner: Runner, snap: Snapshot, revision: int) -> None:
    cluster = require(runner.ctx.ports.cluster, "cluster access")
    if snap.applied_manifest is None:
        raise StepFailed("no manifest with the accepted limits is stored to apply")
    manifest = RenderedManifest.from_text(snap.applied_manifest)
    try:
        result = cluster.apply(snap.endpoint, manifest)
    except Exception as exc:
        raise StepFailed(f"applying the accepted limits failed: {exc}") from exc
    if result.conflicts:
        raise StepFailed("the accepted limits were refused, fields are owned by another manager: "
                         + "; ".join(result.conflicts[:5]))
    _record(runner, snap, LIMITS_APPLIED, revision, f"applied manifest revision {revision} ({manifest.sha256[:12]})",
            sha256=manifest.sha256, changed=result.changed)


def ready_again(runner: Runner, snap: Snapshot, revision: int) -> Snapshot:
    """Watch the revised manifest's rollout, then run the readiness suite; raise :class:`StepFailed` if either fails.

    Returns the deployment with its closed-door count started again from the revision's readiness.
    """
    ctx = runner.ctx
    cluster = require(ctx.ports.cluster, "cluster access")
    client = require(ctx.ports.endpoint, "endpoint access")
    if snap.applied_manifest is None:
        raise StepFailed("no applied manifest is stored for the revised rollout")
    with runner.stoppable(snap) as stop:
        outcome = cluster.watch(snap.endpoint, RenderedManifest.from_text(snap.applied_manifest),
                                timeout_seconds=snap.endpoint.max_deploy_seconds,
                                on_progress=lambda p: runner.progress(snap, p), stop=stop, since=_applied_at(runner, snap))
    if outcome.status == "stopped":
        raise StateMoved("rollout watch stopped")
    if outcome.status != "succeeded":
        raise StepFailed(f"the rollout with the accepted limits {outcome.status.replace('_', ' ')}: {outcome.reason}")
    result = None
    ledger = StoredLedger(ctx, snap.id)  # kimi-ops's own completions: the closed-door proof must not count them as users
    for attempt in range(READINESS_ATTEMPTS):
        ledger.sent()
        result = client.readiness(snap.endpoint)
        ledger.settled("answered" if result.ok else "uncertain")
        if result.ok:
            return _count_from_here(runner, snap, revision, result.summary)
        if attempt + 1 < READINESS_ATTEMPTS:
            time.sleep(runner.readiness_pause)
    assert result is not None
    raise StepFailed(f"readiness with the accepted limits {result.summary}")


def _applied_at(runner: Runner, snap: Snapshot) -> dt.datetime | None:
    """When the newest revision reached the cluster: the ramp's apply of it, or its acceptance at the traffic gate."""
    with runner.ctx.uow() as uow:
        applied = uow.audit.actions(f"deployment:{snap.id}", LIMITS_APPLIED)
        revisions = list(uow.manifests.for_deployment(snap.id))
        newest = (revisions[-1].revision, revisions[-1].at) if revisions else None
    if newest is None:
        return None
    if applied and applied[0][3].get("revision") == newest[0]:
        return applied[0][2]
    return newest[1]


def _count_from_here(runner: Runner, snap: Snapshot, revision: int, summary: str) -> Snapshot:
    """Start the closed-door count again at the revised model's readiness (users were closed out throughout)."""
    baseline = runner.metrics(snap)
    finished = baseline.requests_finished if baseline is not None else None
    with runner.ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        dep.closed_baseline = finished
        dep.own_requests = dep.own_uncertain = 0
        _mark(uow, runner, snap, LIMITS_READY, revision,
              f"readiness with the accepted limits {summary}: the ramp starts from its first step")
        uow.commit()
    return replace(snap, closed_baseline=finished, own=OwnRequests())


def _record(runner: Runner, snap: Snapshot, action: str, revision: int, message: str | None, **details: object) -> None:
    with runner.ctx.uow() as uow:
        runner.locked(uow, snap)
        _mark(uow, runner, snap, action, revision, message, **details)
        uow.commit()


def _mark(uow: SqlUnitOfWork, runner: Runner, snap: Snapshot, action: str, revision: int, message: str | None,
          **details: object) -> None:
    """One part done, in the caller's transaction: its audit row (what a takeover reads) and its line in the thread."""
    now = runner.ctx.clock.now()
    uow.audit.record(at=now, actor="kimi-ops", action=action, subject=f"deployment:{snap.id}",
                     details={"revision": revision, **details})
    if message is not None:
        uow.events.emit(RolloutProgressEvent(deployment_id=snap.id, endpoint_name=snap.endpoint.name, message=message,
                                             state=State.RAMPING.value), at=now)
