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
from typing import Any

from bot.adapters.store.models import Deployment, ReadinessCheck
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.admission import Admission, parse_admission
from bot.domain.checks import Check, GateReport
from bot.domain.events import DrainStalled
from bot.domain.events import RolloutProgress as RolloutProgressEvent
from bot.domain.ramp import WindowObjectives, breaches, next_step, ramp_steps, users_reached, window_between, window_summary
from bot.domain.read_models import DeploymentView
from bot.domain.readiness import MetricsSnapshot, ReadinessResult
from bot.domain.rollout import RenderedManifest, RolloutProgress
from bot.domain.states import NEEDS_STORED_MANIFEST, State, next_state
from bot.services.access import Identity, authorize
from bot.services.admission import AdmissionFailed, apply_admission, record_admission, reopened
from bot.services.context import Context, require
from bot.services.deployments import (
    _view,
    end,
    endpoint_row,
    get_deployment,
    live_deployment,
    path_kind,
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
    ending: str | None = None
    closed_baseline: float | None = None
    own_requests: int = 0


def _snapshot(uow: SqlUnitOfWork, dep: Deployment) -> Snapshot:
    endpoint = EndpointSettings.model_validate(dep.endpoint.settings)
    baseline: dict[str, Any] = {}
    live = live_deployment(uow, dep.endpoint_id)
    if live is not None:
        for gate in ("model", "traffic"):
            row = uow.gates.latest(live.id, gate)
            if row is not None:
                baseline[gate] = row.report
    kind = path_kind(dep)
    return Snapshot(
        id=dep.id,
        kind=kind,
        state=State(dep.state),
        endpoint=endpoint,
        subject=GateSubject(
            deployment_id=dep.id,
            kind=kind,
            endpoint=endpoint,
            release=manifest_from_row(dep.release),
            release_hash=dep.release.tuple_hash,
            manifest_hash=dep.manifest_hash,
            baseline_reports=baseline,
        ),
        applied_manifest=dep.applied_manifest,
        entered_at_epoch=dep.updated_at.timestamp(),
        ending=dep.ending,
        closed_baseline=dep.closed_baseline,
        own_requests=dep.own_requests or 0,
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
            uow.events.emit(RolloutProgressEvent(deployment_id=snap.id, endpoint_name=snap.endpoint.name,
                                                 message=progress.message,
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
            ended: DeploymentView | None = None
            restore_id: int | None = None
            with self.ctx.uow() as uow:
                dep = uow.deployments.get(deployment_id)
                if dep is None:
                    raise UserError(f"no deployment #{deployment_id}")
                if State(dep.state).terminal:
                    ended = _view(uow, dep)
                    holder = uow.deployments.in_flight(dep.endpoint_id)
                    restore_id = holder.id if holder is not None and holder.cause_id == dep.id else None
            if ended is not None:
                if restore_id is not None:
                    self.advance(restore_id)  # it ended after its apply (reject, cancel, expiry): drive its restore
                return ended
            with self.ctx.uow() as uow:
                dep = uow.deployments.get(deployment_id)
                if dep is None:
                    raise UserError(f"no deployment #{deployment_id}")
                if State(dep.state).terminal:
                    continue  # ended between the two reads (a cancel, a reject): the loop's first read handles it
                snap = _snapshot(uow, dep)
                if dep.state == State.DRAIN_STALLED:
                    return _view(uow, dep)  # waiting for a person to choose: wait longer, or abort
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
        # end() restores the previous release when the candidate may be on the cluster, and pages when a
        # rollback or restore leaves users closed out: nobody has to remember to offer or run it.
        try:
            with self.ctx.uow() as uow:
                dep = self._locked(uow, snap)
                end(uow, self.ctx, dep, State.FAILED, reason=reason)
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
        elif state == State.CLOSING:
            self._close(snap)
        elif state == State.DRAINING:
            self._drain(snap)
        elif state == State.APPLYING:
            self._apply(snap)
        elif state == State.ROLLING_OUT:
            self._rollout(snap)
        elif state == State.READINESS:
            self._readiness(snap)
        elif state == State.EVALUATION:
            self._evaluation(snap)
        elif state == State.RAMPING:
            self._ramp(snap)
        elif state == State.REOPENING:
            self._reopen(snap)
        else:
            raise StepFailed(f"no step is defined for state {state}")

    # ------------------------------------------------------------------ steps
    def _check_gate(self, snap: Snapshot, gate: str) -> None:
        report, sent = self._closed_door(snap, run_gate(self.ctx, gate, snap.subject))
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            dep.own_requests = (dep.own_requests or 0) + sent
            store_gate_report(uow, self.ctx, dep, report)
            auto = snap.kind == "rollback" and snap.endpoint.rollback_approvals == 0 and report.approvable
            uow.commit()
        if auto:
            self._auto_decide(snap, gate, why="rollback_approvals is 0")

    def _auto_decide(self, snap: Snapshot, gate: str, *, why: str) -> None:
        """The system records the decision itself (a rollback configured to need none, a restore's evaluation)."""
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            row = uow.gates.latest(dep.id, gate)
            if row is None:
                raise StepFailed(f"no {gate} report to record a decision on")
            now = self.ctx.clock.now()
            row.decision, row.decided_by, row.decided_at = "approved", "kimi-ops", now
            row.seen = {"report_hash": row.report_hash, "release_hash": snap.subject.release_hash, "auto": True}
            uow.audit.record(at=now, actor="kimi-ops", action="gate.approved", subject=f"deployment:{dep.id}",
                             details={"gate": gate, "auto": True, "why": why})
            uow.commit()

    def _closed_door(self, snap: Snapshot, report: GateReport) -> tuple[GateReport, int]:
        """Add to a model or traffic report the proof that no user reached the candidate; return it and the requests sent.

        The model server's finished-request counter since the candidate's readiness passed must not exceed the
        requests kimi-ops itself sent (readiness, evaluation cases, the sweep); an excess is users getting through.
        """
        sent = _requests_sent(report)
        if snap.kind != "deploy" or report.gate not in ("model", "traffic") or snap.closed_baseline is None:
            return report, sent
        current = self._metrics(snap)
        own = snap.own_requests + sent
        reached = users_reached(MetricsSnapshot(None, None, None, None, None, None, requests_finished=snap.closed_baseline),
                                current, own)
        if reached is None:
            check = Check.warned("admission.closed", "the model's request counter could not be read; "
                                 "whether users reached the candidate is unproven")
        elif reached > 0:
            check = Check.failed("admission.closed", f"{reached:.0f} requests besides kimi-ops's own {own} reached the "
                                 "candidate while users were closed out; check the route before approving")
        else:
            check = Check.passed("admission.closed", f"users closed out: the model finished only kimi-ops's own {own} requests "
                                 "since its readiness")
        return report.model_copy(update={"checks": [*report.checks, check]}), sent

    def _metrics(self, snap: Snapshot) -> MetricsSnapshot | None:
        try:
            return require(self.ctx.ports.endpoint, "endpoint access").metrics(snap.endpoint)
        except Exception:
            log.warning("deployment #%s: /metrics unreadable", snap.id, exc_info=True)
            return None

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
        baseline = self._metrics(snap) if snap.kind == "deploy" else None
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            # From here on, every request the candidate finishes beyond kimi-ops's own is a user getting through.
            dep.closed_baseline = baseline.requests_finished if baseline is not None else None
            dep.own_requests = 0
            transition(uow, self.ctx, dep, next_state(snap.kind, State.READINESS),
                       reason=f"readiness completion {result.summary}",
                       details={"ttft_ms": result.ttft_ms, "total_ms": result.total_ms})
            uow.commit()

    def _record_readiness(self, snap: Snapshot, result: ReadinessResult) -> None:
        with self.ctx.uow() as uow:
            endpoint = endpoint_row(uow, snap.endpoint.name)
            now = self.ctx.clock.now()
            uow.readiness.add(ReadinessCheck(
                endpoint_id=endpoint.id, at=now, ok=result.ok, http_status=result.http_status, ttft_ms=result.ttft_ms,
                total_ms=result.total_ms, failure_kind=result.failure_kind, error=result.error,
            ))
            uow.events.emit(RolloutProgressEvent(deployment_id=snap.id, endpoint_name=snap.endpoint.name,
                                                 message=f"readiness completion {result.summary}",
                                                 state=State.READINESS.value), at=now)
            uow.commit()

    def _close(self, snap: Snapshot) -> None:
        reason = f"closed for {snap.kind} #{snap.id}"
        try:
            words = apply_admission(self.ctx, snap.endpoint, Admission.closed(), reason)
        except AdmissionFailed as exc:
            raise StepFailed(str(exc)) from exc
        left = _reservation_left(self.ctx, snap.endpoint)
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            record_admission(uow, self.ctx, snap.endpoint.name, Admission.closed(), reason, actor="kimi-ops",
                             deployment_id=snap.id, words=f"{words}{left}")
            transition(uow, self.ctx, dep, State.DRAINING, reason=f"users closed out: {words}{left}",
                       details={"admission": "closed"})
            uow.commit()

    def _drain(self, snap: Snapshot) -> None:
        client = require(self.ctx.ports.endpoint, "endpoint access")
        elapsed = max(0.0, self.ctx.clock.now().timestamp() - snap.entered_at_epoch)
        remaining = snap.endpoint.drain_seconds if snap.kind == "restore" else max(1.0, snap.endpoint.drain_seconds - elapsed)
        drained, last = client.drain(snap.endpoint, timeout_seconds=remaining)
        if drained:
            self._move(snap, State.APPLYING, "queue drained: no running or waiting requests", drained=True)
            return
        running = f"{(last.running or 0):.0f} running, {(last.waiting or 0):.0f} waiting" if last else "metrics unavailable"
        if snap.kind == "restore":
            # Users are closed out and the candidate is what runs: waiting is always safer than applying over requests.
            self._progress(snap, RolloutProgress(f"still draining ({running}); a restore waits until nothing runs", "draining"))
            raise StateMoved("restore keeps draining")
        group = snap.endpoint.approver_group
        mention = f"<!subteam^{group}> " if group else ""
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            transition(uow, self.ctx, dep, State.DRAIN_STALLED, reason=f"drain deadline passed ({running}); nothing applied")
            uow.events.emit(DrainStalled(
                deployment_id=snap.id, endpoint_name=snap.endpoint.name, running=last.running if last else None,
                waiting=last.waiting if last else None,
                text=f"{mention}Requests still run on {snap.endpoint.name} after {snap.endpoint.drain_seconds:.0f} s "
                     f"({running}); nothing was applied. Wait longer: `/kimi drain wait {snap.id}`; "
                     f"or abort and reopen: `/kimi drain abort {snap.id}`."), at=self.ctx.clock.now())
            uow.commit()

    def _evaluation(self, snap: Snapshot) -> None:
        """A rollback or restore runs the model gate's evaluation: the next deploy compares against a fresh baseline."""
        report = run_gate(self.ctx, "model", snap.subject)
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            store_gate_report(uow, self.ctx, dep, report)
            uow.commit()
        self._auto_decide(snap, "model", why=f"the {snap.kind}'s evaluation is recorded, not decided")
        note = "" if report.approvable else "; the evaluation found problems, see its report (the release is restored anyway)"
        self._move(snap, State.REOPENING, f"evaluation recorded: {report.summary or report.status}{note}")

    def _reopen(self, snap: Snapshot) -> None:
        reason = f"reopened after {snap.kind} #{snap.id}"
        try:
            words = apply_admission(self.ctx, snap.endpoint, Admission.open(), reason)
        except AdmissionFailed as exc:
            raise StepFailed(str(exc)) from exc
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            record_admission(uow, self.ctx, snap.endpoint.name, Admission.open(), reason, actor="kimi-ops",
                             deployment_id=snap.id, words=words)
            if snap.ending is not None or snap.kind == "deploy":
                ending = State(snap.ending or State.CANCELLED)
                transition(uow, self.ctx, dep, ending,
                           reason=f"{dep.state_reason or ending.words}; users are back on the running release")
            else:
                reopened(uow, self.ctx, snap.endpoint.name)
                transition(uow, self.ctx, dep, State.LIVE, reason=f"{reason}: {words}", details={"admission": "open"})
            uow.commit()

    def _ramp(self, snap: Snapshot) -> None:
        """Users meet the candidate in steps; a step whose soak breaks an objective fails it (and restores)."""
        endpoint = snap.endpoint
        with self.ctx.uow() as uow:
            row = uow.endpoints.get(endpoint.name)
            current = row.admission if row is not None else "closed"
        steps = ramp_steps(endpoint.ramp.steps) if endpoint.route is not None else ("open",)
        if current not in steps:
            reached = users_reached(
                MetricsSnapshot(None, None, None, None, None, None, requests_finished=snap.closed_baseline),
                self._metrics(snap), snap.own_requests) if snap.closed_baseline is not None else None
            if reached:
                raise StepFailed(f"{reached:.0f} requests besides kimi-ops's own reached the candidate "
                                 "while users were closed out")
        step = current if current in steps else next_step(steps, None)
        objectives = WindowObjectives(ttft_p99_ms=endpoint.ttft_objective_ms, error_rate=endpoint.ramp.error_rate,
                                      queue_depth=endpoint.ramp.queue_depth, kv_cache_usage=endpoint.ramp.kv_cache_usage)
        while step is not None:
            admission = parse_admission(step)
            reason = f"{snap.kind} #{snap.id} ramp: {step}"
            try:
                words = apply_admission(self.ctx, endpoint, admission, reason)
            except AdmissionFailed as exc:
                raise StepFailed(str(exc)) from exc
            with self.ctx.uow() as uow:
                self._locked(uow, snap)
                record_admission(uow, self.ctx, endpoint.name, admission, reason, actor="kimi-ops", deployment_id=snap.id,
                                 words=words)
                uow.commit()
            if step == "open":
                break
            self._soak(snap, step, objectives)
            step = next_step(steps, step)
        self._move(snap, State.LIVE, "ramp complete: everyone reaches Kimi K3", admission="open")

    def _soak(self, snap: Snapshot, step: str, objectives: WindowObjectives) -> None:
        ramp = snap.endpoint.ramp
        before = self._metrics(snap)
        if before is None:
            raise StepFailed(f"ramp step {step}: the model's /metrics cannot be read, so the objectives cannot be checked")
        stop = threading.Event()
        with self._lock:
            self._stops[snap.id] = stop
        peak_waiting, peak_kv, started = before.waiting, before.kv_cache_usage, time.monotonic()
        after = before
        try:
            while (left := ramp.soak_seconds - (time.monotonic() - started)) > 0:
                if stop.wait(min(ramp.sample_seconds, left)):
                    raise StateMoved("ramp soak stopped")
                sample = self._metrics(snap)
                if sample is None:
                    continue
                after = sample
                peak_waiting = max(peak_waiting or 0.0, sample.waiting or 0.0)
                peak_kv = max(peak_kv or 0.0, sample.kv_cache_usage or 0.0)
        finally:
            with self._lock:
                self._stops.pop(snap.id, None)
        final = self._metrics(snap) or after
        window = window_between(before, final, own_requests=0, seconds=time.monotonic() - started,
                                peak_waiting=peak_waiting, peak_kv_cache_usage=peak_kv)
        broken = breaches(window, objectives)
        if broken:
            raise StepFailed(f"ramp step {step} broke its objectives: {'; '.join(broken)} ({window_summary(window)})")
        self._progress(snap, RolloutProgress(f"ramp step {step} held: {window_summary(window)}", "ramping"))

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
        report, sent = self._closed_door(snap, run_gate(self.ctx, gate, snap.subject))
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            latest = uow.gates.latest(dep.id, gate)
            if latest is not None and latest.decision is not None:
                raise Refused(f"the {gate} gate was decided while the checks ran ({latest.decision} by {latest.decided_by})")
            dep.own_requests = (dep.own_requests or 0) + sent
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
                end(uow, self.ctx, dep, State.INTERRUPTED, reason=f"not resumed after a restart while {was.words}: {why}",
                    details={"resumed": False})
                uow.commit()
        except Exception:
            log.exception("could not mark deployment #%s interrupted", deployment_id)


def _requests_sent(report: GateReport) -> int:
    """Requests a gate's run sent to the endpoint (evaluation cases, the sweep's requests)."""
    evaluation = report.attachments.get("evaluation") or {}
    sweep = report.attachments.get("sweep") or {}
    return len(evaluation.get("cases") or []) + int(sweep.get("requests") or 0)


def _reservation_left(ctx: Context, endpoint: EndpointSettings) -> str:
    """``; its reservation ends in 3 d 4 h`` for the closing announcement, or nothing when none is known."""
    from bot.services.reservations import reservation_for

    try:
        found = reservation_for(ctx, endpoint, fresh=False)
    except Exception:
        log.warning("reservation of %s unreadable for the closing announcement", endpoint.name, exc_info=True)
        return ""
    if found is None or found.end is None:
        return ""
    left = found.end - ctx.clock.now()
    hours = max(0, int(left.total_seconds() // 3600))
    return f"; its reservation ends in {hours // 24} d {hours % 24} h"
