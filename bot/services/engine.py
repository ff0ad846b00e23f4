"""The deployment engine: runs a deployment's steps until it waits for a person or ends.

Each step reads the persisted state, does its slow work (checks, apply, rollout
watch, readiness) outside any transaction, then moves the state machine in one
transaction. The state is re-checked under a row lock before every move, so a
concurrent cancel or a second runner makes this one stop instead of acting twice.
After a crash, :func:`resume_all` picks every in-flight deployment up from its
stored state: the manifest to apply is stored before it is applied, and a
deployment found rolling out is re-attached to its rollout watch, not re-applied.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass

from bot.adapters.store.models import Deployment, ReadinessCheck
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.events import RolloutProgress as RolloutProgressEvent
from bot.domain.read_models import DeploymentView
from bot.domain.readiness import ReadinessResult
from bot.domain.rollout import RenderedManifest, RolloutProgress
from bot.domain.states import ADMISSION_CLOSED, NEEDS_STORED_MANIFEST, State, next_state
from bot.services.access import Identity, authorize
from bot.services.context import Context, require
from bot.services.deployments import (
    _view,
    get_deployment,
    live_deployment,
    store_gate_report,
    transition,
)
from bot.services.errors import NotConfigured, NotFound, Refused, UserError
from bot.services.gates import GateSubject, run_gate
from bot.services.releases import manifest_from_row

log = logging.getLogger(__name__)

READINESS_ATTEMPTS = 3
READINESS_PAUSE_SECONDS = 2.0


class StateMoved(Exception):
    """The deployment is no longer in the state this runner expected: someone else acted."""


class StepFailed(Exception):
    """A step failed in a way the user must hear about; the message is the reason."""


@dataclass(frozen=True)
class Snapshot:
    id: int
    kind: str
    state: State
    endpoint: EndpointSettings
    subject: GateSubject
    applied_manifest: str | None
    entered_at_epoch: float


def _snapshot(uow: SqlUnitOfWork, dep: Deployment) -> Snapshot:
    endpoint = EndpointSettings.model_validate(dep.endpoint.settings)
    baseline: dict = {}
    live = live_deployment(uow, dep.endpoint_id)
    if live is not None:
        for gate in ("model", "traffic"):
            row = uow.gates.latest(live.id, gate)
            if row is not None:
                baseline[gate] = row.report
    return Snapshot(
        id=dep.id,
        kind=dep.kind,
        state=State(dep.state),
        endpoint=endpoint,
        subject=GateSubject(
            deployment_id=dep.id,
            kind=dep.kind,
            endpoint=endpoint,
            release=manifest_from_row(dep.release),
            release_hash=dep.release.tuple_hash,
            manifest_hash=dep.manifest_hash,
            baseline_reports=baseline,
        ),
        applied_manifest=dep.applied_manifest,
        entered_at_epoch=dep.updated_at.timestamp(),
    )


class Engine:
    """Runs deployments; one instance per process (the Slack app, the CLI, the sandbox)."""

    def __init__(self, ctx: Context, *, readiness_pause: float = READINESS_PAUSE_SECONDS) -> None:
        self.ctx = ctx
        self.readiness_pause = readiness_pause
        self._stops: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ plumbing
    def _locked(self, uow: SqlUnitOfWork, snap: Snapshot) -> Deployment:
        dep = uow.deployments.get_for_update(snap.id)
        if dep is None or dep.state != snap.state:
            raise StateMoved(f"deployment #{snap.id} moved from {snap.state} to {dep.state if dep else 'nowhere'}")
        return dep

    def _move(self, snap: Snapshot, target: str, reason: str | None = None, **details: object) -> None:
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            transition(uow, self.ctx, dep, target, reason=reason, details=details or None)
            uow.commit()

    def _progress(self, snap: Snapshot, progress: RolloutProgress) -> None:
        with self.ctx.uow() as uow:
            uow.events.emit(RolloutProgressEvent(deployment_id=snap.id, endpoint_name=snap.endpoint.name, message=progress.message,
                                                 state=progress.state), at=self.ctx.clock.now())
            uow.commit()

    def stop(self, deployment_id: int) -> None:
        """Ask a running rollout watch of this deployment to stop (explicitly, never by hanging)."""
        with self._lock:
            event = self._stops.get(deployment_id)
        if event is not None:
            event.set()

    def stop_all(self) -> None:
        with self._lock:
            for event in self._stops.values():
                event.set()

    # ------------------------------------------------------------------ the loop
    def advance(self, deployment_id: int) -> DeploymentView:
        """Run steps until the deployment waits for a decision or ends; return where it stands."""
        while True:
            with self.ctx.uow() as uow:
                dep = uow.deployments.get(deployment_id)
                if dep is None:
                    raise UserError(f"no deployment #{deployment_id}")
                if State(dep.state).terminal:
                    return _view(uow, dep)
                snap = _snapshot(uow, dep)
                gate = State(dep.state).gate
                latest = uow.gates.latest(dep.id, gate) if gate else None
                if gate and latest is not None and latest.decision is None:
                    return _view(uow, dep)  # waiting for a person
                decision, has_report = (latest.decision if latest else None), latest is not None
            try:
                self._step(snap, latest_decision=decision, has_report=has_report)
            except StateMoved as moved:
                log.info("%s", moved)
                continue
            except (StepFailed, NotConfigured) as exc:
                self._fail(snap, str(exc))
            except Exception as exc:
                correlation = uuid.uuid4().hex[:12]
                log.exception("deployment step crashed", extra={"correlation_id": correlation, "deployment": snap.id})
                self._fail(snap, f"unexpected error in {snap.state} ({type(exc).__name__}; correlation id {correlation})")

    def _fail(self, snap: Snapshot, reason: str) -> None:
        # Stored, not only said: views and rollback offers read the column, never the reason text.
        offered = snap.kind == "deploy" and snap.state.past_apply
        if offered:
            reason += "; rollback offered"
        if snap.kind == "rollback" and snap.state in ADMISSION_CLOSED:
            reason += "; admission stays closed until an operator reopens it"
        try:
            with self.ctx.uow() as uow:
                dep = self._locked(uow, snap)
                dep.rollback_offered = offered
                transition(uow, self.ctx, dep, State.FAILED, reason=reason, details={"rollback_offered": True} if offered else None)
                uow.commit()
        except StateMoved:
            log.info("deployment #%s moved on (e.g. cancelled) before its failure could be recorded: %s", snap.id, reason)

    def _step(self, snap: Snapshot, *, latest_decision: str | None, has_report: bool) -> None:
        state = snap.state
        if state == State.REQUESTED:
            self._move(snap, next_state(snap.kind, state))
        elif (gate := state.gate) is not None:
            if not has_report:
                self._check_gate(snap, gate)
            elif latest_decision == "approved":
                self._move(snap, next_state(snap.kind, state))
            else:  # rejected gates end the deployment in decide_gate; nothing to do here
                raise StateMoved("gate decided without a transition")
        elif state == State.CLOSE_ADMISSION:
            self._admission(snap, open_=False)
        elif state == State.DRAINING:
            self._drain(snap)
        elif state == State.APPLYING:
            self._apply(snap)
        elif state == State.ROLLING_OUT:
            self._rollout(snap)
        elif state == State.READINESS:
            self._readiness(snap)
        elif state == State.REOPEN:
            self._admission(snap, open_=True)
        else:
            raise StepFailed(f"no step is defined for state {state}")

    # ------------------------------------------------------------------ steps
    def _check_gate(self, snap: Snapshot, gate: str) -> None:
        report = run_gate(self.ctx, gate, snap.subject)
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            store_gate_report(uow, self.ctx, dep, report)
            auto = snap.kind == "rollback" and snap.endpoint.rollback_approvals == 0 and report.approvable
            uow.commit()
        if auto:
            # Configured to need no approval for a rollback: the system records the decision itself.
            with self.ctx.uow() as uow:
                dep = self._locked(uow, snap)
                row = uow.gates.latest(dep.id, gate)
                now = self.ctx.clock.now()
                row.decision, row.decided_by, row.decided_at = "approved", "kimi-ops", now
                row.seen = {"report_hash": row.report_hash, "release_hash": snap.subject.release_hash, "auto": True}
                uow.audit.record(at=now, actor="kimi-ops", action="gate.approved", subject=f"deployment:{dep.id}",
                                 details={"gate": gate, "auto": True, "why": "rollback_approvals is 0"})
                uow.commit()

    def _render(self, snap: Snapshot) -> RenderedManifest:
        cluster = require(self.ctx.ports.cluster, "cluster access")
        if snap.applied_manifest is not None:
            return RenderedManifest.from_text(snap.applied_manifest)
        if snap.kind == "rollback":
            raise StepFailed("the rollback has no stored manifest to restore")
        try:
            manifest = cluster.render(snap.subject.release, snap.endpoint, snap.subject.release_hash)
        except Exception as exc:
            raise StepFailed(f"the manifest could not be rendered: {exc}") from exc
        # Stored before it is applied: after a crash we re-apply exactly this, never a fresh render.
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            dep.applied_manifest, dep.manifest_hash = manifest.text, manifest.sha256
            uow.audit.record(at=self.ctx.clock.now(), actor="kimi-ops", action="manifest.rendered",
                             subject=f"deployment:{dep.id}", details={"sha256": manifest.sha256})
            uow.commit()
        return manifest

    def _apply(self, snap: Snapshot) -> None:
        cluster = require(self.ctx.ports.cluster, "cluster access")
        manifest = self._render(snap)
        try:
            result = cluster.apply(snap.endpoint, manifest)
        except Exception as exc:
            raise StepFailed(f"apply failed: {exc}") from exc
        if result.conflicts:
            raise StepFailed("apply refused, fields are owned by another manager: " + "; ".join(result.conflicts[:5]))
        self._move(snap, State.ROLLING_OUT, f"applied manifest {manifest.sha256[:12]}",
                   manifest_hash=manifest.sha256, changed=result.changed)

    def _rollout(self, snap: Snapshot) -> None:
        cluster = require(self.ctx.ports.cluster, "cluster access")
        if snap.applied_manifest is None:
            raise StepFailed("no applied manifest is stored for this rollout")
        manifest = RenderedManifest.from_text(snap.applied_manifest)
        elapsed = max(0.0, self.ctx.clock.now().timestamp() - snap.entered_at_epoch)
        remaining = max(1.0, snap.endpoint.max_deploy_seconds - elapsed)
        stop = threading.Event()
        with self._lock:
            self._stops[snap.id] = stop
        try:
            outcome = cluster.watch(
                snap.endpoint, manifest, timeout_seconds=remaining, on_progress=lambda p: self._progress(snap, p), stop=stop
            )
        finally:
            with self._lock:
                self._stops.pop(snap.id, None)
        if outcome.status == "succeeded":
            self._move(snap, State.READINESS, outcome.reason, rollout_seconds=round(outcome.elapsed_seconds, 1))
        elif outcome.status == "stopped":
            raise StateMoved("rollout watch stopped")
        else:
            raise StepFailed(f"rollout {outcome.status.replace('_', ' ')}: {outcome.reason}")

    def _readiness(self, snap: Snapshot) -> None:
        client = require(self.ctx.ports.endpoint, "endpoint access")
        result: ReadinessResult | None = None
        for attempt in range(READINESS_ATTEMPTS):
            result = client.readiness(snap.endpoint)
            self._record_readiness(snap, result)
            if result.ok:
                break
            if attempt + 1 < READINESS_ATTEMPTS:
                time.sleep(self.readiness_pause)
        assert result is not None
        if not result.ok:
            raise StepFailed(f"readiness completion {result.summary}")
        self._move(snap, next_state(snap.kind, State.READINESS), f"readiness completion {result.summary}",
                   ttft_ms=result.ttft_ms, total_ms=result.total_ms)

    def _record_readiness(self, snap: Snapshot, result: ReadinessResult) -> None:
        with self.ctx.uow() as uow:
            endpoint = uow.endpoints.get(snap.endpoint.name)
            now = self.ctx.clock.now()
            uow.readiness.add(ReadinessCheck(
                endpoint_id=endpoint.id, at=now, ok=result.ok, http_status=result.http_status, ttft_ms=result.ttft_ms,
                total_ms=result.total_ms, failure_kind=result.failure_kind, error=result.error,
            ))
            uow.events.emit(RolloutProgressEvent(deployment_id=snap.id, endpoint_name=snap.endpoint.name,
                                                 message=f"readiness completion {result.summary}", state=State.READINESS.value), at=now)
            uow.commit()

    def _admission(self, snap: Snapshot, *, open_: bool) -> None:
        cluster = require(self.ctx.ports.cluster, "cluster access")
        reason = f"{'reopened after' if open_ else 'closed for'} rollback #{snap.id}"
        try:
            cluster.set_admission(snap.endpoint, open_, reason)
        except Exception as exc:
            raise StepFailed(f"could not {'reopen' if open_ else 'close'} admission: {exc}") from exc
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            endpoint = uow.endpoints.get(snap.endpoint.name)
            endpoint.admission_open = open_
            transition(uow, self.ctx, dep, next_state(snap.kind, snap.state), reason=reason, details={"admission_open": open_})
            uow.commit()

    def _drain(self, snap: Snapshot) -> None:
        client = require(self.ctx.ports.endpoint, "endpoint access")
        drained, last = client.drain(snap.endpoint, timeout_seconds=float(snap.endpoint.max_deploy_seconds) / 12)
        if drained:
            reason = "queue drained: no running or waiting requests"
        else:
            running = f"{(last.running or 0):.0f} running, {(last.waiting or 0):.0f} waiting" if last else "metrics unavailable"
            reason = f"drain deadline passed ({running}); applying the previous release anyway"
        self._move(snap, State.APPLYING, reason, drained=drained)

    def recheck(self, deployment_id: int, gate: str, actor: Identity) -> DeploymentView:
        """Run a waiting gate's checks again (the only way past a failed or errored check besides rejecting)."""
        authorize(self.ctx, actor, "recheck", f"deployment:{deployment_id}")
        with self.ctx.uow() as uow:
            dep = uow.deployments.get(deployment_id)
            if dep is None:
                raise NotFound(f"no deployment #{deployment_id}")
            if State(dep.state).gate != gate:
                raise Refused(f"the {gate} gate of deployment #{deployment_id} is not waiting (the deployment is {dep.state})")
            snap = _snapshot(uow, dep)
        report = run_gate(self.ctx, gate, snap.subject)
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            latest = uow.gates.latest(dep.id, gate)
            if latest is not None and latest.decision is not None:
                raise Refused(f"the {gate} gate was decided while the checks ran ({latest.decision} by {latest.decided_by})")
            store_gate_report(uow, self.ctx, dep, report, actor=actor.user_id)
            uow.commit()
        return get_deployment(self.ctx, deployment_id)

    # ------------------------------------------------------------------ recovery
    def resume_all(self) -> list[DeploymentView]:
        """After a restart: continue every in-flight deployment from its stored state.

        A deployment whose stored state cannot be continued (its release or
        endpoint settings no longer read, or a rollout with no stored manifest to
        watch) is marked ``interrupted`` with the reason instead of being left
        holding its endpoint, so a person sees why and can roll back or retry.
        """
        views = []
        with self.ctx.uow() as uow:
            ids = [d.id for d in uow.deployments.all_in_flight()]
        for deployment_id in ids:
            why = self._unresumable(deployment_id)
            if why is not None:
                self._interrupt(deployment_id, why)
                views.append(get_deployment(self.ctx, deployment_id))
                continue
            try:
                views.append(self.advance(deployment_id))
            except Exception:
                # Not the stored state (checked above) but e.g. the database going away: a later resume may succeed,
                # so the deployment keeps its endpoint rather than being ended by a transient fault.
                log.exception("could not resume deployment #%s", deployment_id)
                views.append(get_deployment(self.ctx, deployment_id))
        return views

    def _unresumable(self, deployment_id: int) -> str | None:
        """Why the stored state of a deployment cannot be continued, or ``None`` when it can."""
        with self.ctx.uow() as uow:
            dep = uow.deployments.get(deployment_id)
            if dep is None or State(dep.state).terminal:
                return None
            try:
                snap = _snapshot(uow, dep)
            except Exception as exc:  # e.g. a release stored by a version whose tuple this one refuses
                log.warning("deployment #%s: stored state unreadable", deployment_id, exc_info=True)
                return f"its stored release or endpoint settings can no longer be read ({type(exc).__name__})"
        needs_manifest = snap.state in NEEDS_STORED_MANIFEST.get(snap.kind, frozenset())
        if needs_manifest and snap.applied_manifest is None:
            return f"no applied manifest is stored for its {snap.state.words} step, so what the cluster runs is unknown"
        if snap.applied_manifest is not None:
            try:
                RenderedManifest.from_text(snap.applied_manifest)
            except Exception as exc:
                return f"its stored manifest can no longer be read ({type(exc).__name__})"
        return None

    def _interrupt(self, deployment_id: int, why: str) -> None:
        """Mark a deployment that cannot be resumed as interrupted (releasing its endpoint), with the reason."""
        try:
            with self.ctx.uow() as uow:
                dep = uow.deployments.get_for_update(deployment_id)
                if dep is None or State(dep.state).terminal:
                    return
                was = State(dep.state)
                note = "; check the endpoint, roll back if needed" if was.past_apply else ""
                transition(uow, self.ctx, dep, State.INTERRUPTED, reason=f"not resumed after a restart while {was.words}: {why}{note}",
                           details={"resumed": False})
                uow.commit()
        except Exception:
            log.exception("could not mark deployment #%s interrupted", deployment_id)
