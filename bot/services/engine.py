"""The deployment engine: runs a deployment's steps until it waits for a person or ends.

Each step reads the persisted state, does its slow work (checks, apply, rollout
watch, readiness) outside any transaction, then moves the state machine in one
transaction. The state is re-checked under a row lock before every move, so a
concurrent cancel or a second runner makes this one stop instead of acting twice.
After a crash, :func:`resume_all` picks every in-flight deployment up from its
stored state: the manifest to apply is stored before it is applied, and a
deployment found rolling out is re-attached to its rollout watch, not re-applied.

With several replicas, a deployment is driven by one at a time: the engine claims
its endpoint's lease (:mod:`bot.adapters.store.leases`) before driving, a heartbeat
thread renews it while a step runs, and every move re-checks under a row lock that
the lease is still this engine's. An advance that finds the lease alive elsewhere
returns the current view without acting; :meth:`Engine.lapsed` names the in-flight
deployments whose driver stopped renewing, for any replica to take over.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from bot.adapters.plots import plot_ramp
from bot.adapters.store.errors import store_unavailable
from bot.adapters.store.models import Deployment, ReadinessCheck
from bot.adapters.store.outbox import event_of
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.admission import Admission, parse_admission
from bot.domain.checks import Check, GateReport
from bot.domain.coldstart import ColdStart
from bot.domain.events import DrainStalled, RampPlot, RampSplit
from bot.domain.events import RolloutProgress as RolloutProgressEvent
from bot.domain.own_requests import OwnRequests, Reach, reach_since
from bot.domain.ramp import Window, needs_approval, next_step, ramp_steps, window_between, window_summary
from bot.domain.read_models import DeploymentView
from bot.domain.readiness import MetricsSnapshot, ReadinessResult
from bot.domain.rollout import RenderedManifest, RolloutProgress
from bot.domain.states import NEEDS_STORED_MANIFEST, WAITING, State, next_state
from bot.services.access import Identity, authorize
from bot.services.admission import (
    STUCK,
    AdmissionFailed,
    apply_admission,
    open_stuck_incident,
    record_admission,
    reopened,
)
from bot.services.context import Context, require
from bot.services.deployments import (
    RAMP_ASKED,
    _view,
    end,
    endpoint_row,
    get_deployment,
    live_deployment,
    path_kind,
    ramp_step_waiting,
    ramp_steps_approved,
    store_gate_report,
    transition,
)
from bot.services.errors import NotConfigured, NotFound, Refused, Unavailable, UserError
from bot.services.gates import GateSubject, run_gate
from bot.services.objectives import RampObjectives
from bot.services.ports import StartupReader
from bot.services.releases import manifest_from_row

log = logging.getLogger(__name__)

READINESS_ATTEMPTS = 3
READINESS_PAUSE_SECONDS = 2.0


class StateMoved(Exception):
    """The deployment is no longer in the state this runner expected: someone else acted."""


class LeaseLost(StateMoved):
    """Another replica holds this deployment's lease now (this one stalled past its lapse): stop driving."""


class WaitingForPerson(Exception):
    """The ramp reached a step that needs an approval: nothing to drive until a person answers."""


class TryLater(Exception):
    """Nothing can move now (a restore whose drain has not ended): the thread returns and lets the lease go, and the
    next takeover round (:meth:`Engine.lapsed`, every ``lease_takeover_seconds`` on every replica) resumes it."""


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
    own: OwnRequests = field(default_factory=OwnRequests)
    partner: EndpointSettings | None = None  # a pair side's other side (where users are while this one is tried)


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
    partner_row = uow.endpoints.get(endpoint.pair.partner) if endpoint.pair is not None else None
    partner = EndpointSettings.model_validate(partner_row.settings) if partner_row is not None else None
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
            requester=dep.requested_by,
        ),
        applied_manifest=dep.applied_manifest,
        entered_at_epoch=dep.updated_at.timestamp(),
        ending=dep.ending,
        closed_baseline=dep.closed_baseline,
        own=OwnRequests(dep.own_requests or 0, dep.own_uncertain or 0),
        partner=partner,
    )


def _wall() -> dt.datetime:
    # Leases are real time on every replica (the heartbeat sleeps real seconds), whatever clock the services use.
    return dt.datetime.now(dt.UTC)


@dataclass
class _Hold:
    """This engine's lease on one endpoint: the thread driving under it, how deeply (a restore nests), its heartbeat."""

    endpoint_id: int
    thread: int
    depth: int = 1
    deployments: set[int] = field(default_factory=set)
    done: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)


class Engine:
    """Runs deployments; one instance per process (the Slack app, the CLI, the sandbox)."""

    def __init__(self, ctx: Context, *, readiness_pause: float = READINESS_PAUSE_SECONDS, holder: str | None = None) -> None:
        self.ctx = ctx
        self.readiness_pause = readiness_pause
        # Unique per process (pod name, pid and a suffix): two processes on one host never share a lease.
        self.holder = holder or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._stops: dict[int, threading.Event] = {}
        self._holds: dict[int, _Hold] = {}
        self._closing = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ ownership
    def _acquire(self, deployment_id: int) -> _Hold | None:
        """Claim the lease of the deployment's endpoint for this thread; ``None`` when someone else drives it.

        Re-entrant for the thread that holds it (a deploy ending after apply drives its restore inside its own
        advance); another thread of this process gets ``None`` just as another replica does.
        """
        with self.ctx.uow() as uow:
            dep = uow.deployments.get(deployment_id)
            if dep is None:
                raise NotFound(f"no deployment #{deployment_id}")
            endpoint_id = dep.endpoint_id
        me = threading.get_ident()
        with self._lock:
            hold = self._holds.get(endpoint_id)
            if hold is not None:
                if hold.thread != me:
                    return None
                hold.depth += 1
                hold.deployments.add(deployment_id)
                return hold
            hold = self._holds[endpoint_id] = _Hold(endpoint_id, me, deployments={deployment_id})
        try:
            now = _wall()
            with self.ctx.uow() as uow:
                won = uow.leases.claim(endpoint_id, deployment_id, self.holder, now, now + self._lease_length())
                uow.commit()
        except BaseException:
            self._forget(hold)
            raise
        if not won:
            self._forget(hold)
            log.info("deployment #%s is driven by another replica; not acting", deployment_id)
            return None
        threading.Thread(target=self._heartbeat, args=(hold,), name=f"kimi-lease-{endpoint_id}", daemon=True).start()
        return hold

    def _release(self, hold: _Hold) -> None:
        with self._lock:
            hold.depth -= 1
            if hold.depth > 0:
                return
        self._forget(hold)
        hold.done.set()
        if hold.lost.is_set():
            return
        try:
            with self.ctx.uow() as uow:
                uow.leases.release(hold.endpoint_id, self.holder, _wall())
                uow.commit()
        except Exception:  # it lapses by itself within lease_seconds
            log.warning("could not release the lease of endpoint %s", hold.endpoint_id, exc_info=True)

    def _forget(self, hold: _Hold) -> None:
        with self._lock:
            if self._holds.get(hold.endpoint_id) is hold:
                del self._holds[hold.endpoint_id]

    def _lease_length(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.ctx.settings.lease_seconds)

    def _heartbeat(self, hold: _Hold) -> None:
        """Renew the lease while its holder drives; on losing it, stop the rollout watch or soak that runs."""
        while not hold.done.wait(self.ctx.settings.lease_heartbeat_seconds):
            try:
                with self.ctx.uow() as uow:
                    kept = uow.leases.renew(hold.endpoint_id, self.holder, _wall() + self._lease_length())
                    uow.commit()
            except Exception:  # the database is away: keep trying; the fenced moves refuse if another took over
                log.warning("could not renew the lease of endpoint %s", hold.endpoint_id, exc_info=True)
                continue
            if not kept:
                log.warning("lease of endpoint %s taken over by another replica; this one stops driving", hold.endpoint_id)
                hold.lost.set()
                for deployment_id in list(hold.deployments):
                    self.stop(deployment_id)
                return

    def lapsed(self) -> list[int]:
        """In-flight deployments nobody drives: their lease lapsed (a crash, a stop) and no person is to act.

        A deployment whose state moved within the last lease length under another deployment's (or no) lease row
        is left to the replica that just moved it, which is about to claim it itself.
        """
        now = _wall()
        recent = now - self._lease_length()
        found: list[int] = []
        with self.ctx.uow() as uow:
            for dep in uow.deployments.all_in_flight():
                lease = uow.leases.get(dep.endpoint_id)
                if lease is not None and lease.expires_at > now:
                    continue
                if dep.updated_at > recent and (lease is None or lease.deployment_id != dep.id):
                    continue
                if _waits_for_person(uow, dep):
                    continue
                found.append(dep.id)
        with self._lock:
            local = {d for hold in self._holds.values() for d in hold.deployments}
        return [d for d in found if d not in local]

    # ------------------------------------------------------------------ plumbing
    def _locked(self, uow: SqlUnitOfWork, snap: Snapshot) -> Deployment:
        dep = uow.deployments.get_for_update(snap.id)
        if dep is None or dep.state != snap.state:
            raise StateMoved(f"deployment #{snap.id} moved from {snap.state} to {dep.state if dep else 'nowhere'}")
        # Fencing: the lease row is locked with the deployment, so a replica that took over cannot claim it between
        # this check and the commit, and a driver that lost its lease never moves the state.
        if not uow.leases.holds(dep.endpoint_id, self.holder):
            raise LeaseLost(f"deployment #{snap.id}: the lease of its endpoint is held by another replica")
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
        """Shutting down: stop every watch and soak, and drive no further step (the leases lapse for a takeover)."""
        self._closing = True
        with self._lock:
            for event in self._stops.values():
                event.set()

    # ------------------------------------------------------------------ the loop
    def advance(self, deployment_id: int) -> DeploymentView:
        """Run steps until the deployment waits for a decision or ends; return where it stands.

        Only under its endpoint's lease: when another replica (or thread) drives it, the view is returned as it is.
        """
        if self._closing:
            return get_deployment(self.ctx, deployment_id)
        hold = self._acquire(deployment_id)
        if hold is None:
            return get_deployment(self.ctx, deployment_id)
        try:
            return self._drive(deployment_id, hold)
        except Exception as exc:
            if not store_unavailable(exc):
                raise
            # Whatever step was under way rolled back with its transaction: the deployment stays in flight and is
            # driven again once the database answers (its lease lapses and a replica's takeover round resumes it).
            log.warning("deployment #%s: the database is unreachable; left in flight", deployment_id)
            raise Unavailable(f"the database is unreachable while deployment #{deployment_id} runs; it stays where it "
                              "is and carries on once the database answers") from exc
        finally:
            self._release(hold)

    def _drive(self, deployment_id: int, hold: _Hold) -> DeploymentView:
        while True:
            if hold.lost.is_set() or self._closing:
                return get_deployment(self.ctx, deployment_id)
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
            except (WaitingForPerson, TryLater):
                return get_deployment(self.ctx, deployment_id)
            except LeaseLost as lost:
                log.warning("%s; stopped driving", lost)
                hold.lost.set()
            except StateMoved as moved:
                log.info("%s", moved)
                continue
            except (StepFailed, NotConfigured) as exc:
                self._fail(snap, str(exc))
            except Exception as exc:
                if store_unavailable(exc):
                    # A database outage is not the deployment's failure (the rollout may well have succeeded):
                    # nothing was recorded, so it stays where it is (see advance).
                    raise
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
            _add_own(dep, sent)
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

    def _closed_door(self, snap: Snapshot, report: GateReport) -> tuple[GateReport, OwnRequests]:
        """Add to a model or traffic report the proof that no user reached the candidate; return it and the requests sent.

        The model server's finished-request counter since the candidate's readiness passed must not exceed the
        requests kimi-ops itself sent (readiness, evaluation cases, the sweep); an excess is users getting through.
        """
        sent = _requests_sent(report)
        if snap.kind != "deploy" or report.gate not in ("model", "traffic") or snap.closed_baseline is None:
            return report, sent
        reach = self._reach(snap, snap.own + sent)
        if reach is None:
            check = Check.warned("admission.closed", "the model's request counter could not be read; "
                                 "whether users reached the candidate is unproven")
        elif reach.users > 0:
            check = Check.failed("admission.closed", f"{reach.users:.0f} requests besides kimi-ops's own "
                                 f"{_own_words(reach.own)} reached the candidate while users were closed out; "
                                 "check the route before approving")
        elif not reach.proven_closed:
            check = Check.warned("admission.closed", f"the model finished {reach.beyond_answered:.0f} requests more than "
                                 f"kimi-ops's own {reach.own.answered} answered ones since its readiness; "
                                 f"{reach.own.uncertain} of kimi-ops's requests broke mid-way and may account for them, "
                                 "so whether users reached the candidate is unproven")
        else:
            check = Check.passed("admission.closed", f"users closed out: the model finished {reach.finished:.0f} requests "
                                 f"since its readiness, none beyond kimi-ops's own {reach.own.answered} answered ones")
        return report.model_copy(update={"checks": [*report.checks, check]}), sent

    def _reach(self, snap: Snapshot, own: OwnRequests) -> Reach | None:
        """The candidate's finished requests since its readiness passed (users closed out from there on)."""
        if snap.closed_baseline is None:
            return None
        since = MetricsSnapshot(None, None, None, None, None, None, requests_finished=snap.closed_baseline)
        return reach_since(since, self._metrics(snap), own)

    def _metrics(self, snap: Snapshot, endpoint: EndpointSettings | None = None) -> MetricsSnapshot | None:
        try:
            return require(self.ctx.ports.endpoint, "endpoint access").metrics(endpoint or snap.endpoint)
        except Exception:
            log.warning("deployment #%s: /metrics of %s unreadable", snap.id, (endpoint or snap.endpoint).name,
                        exc_info=True)
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
        with self.ctx.uow() as uow:
            # This deployment's apply began when it entered `applying` (the latest time, after a resumed apply):
            # events older than that are an earlier deployment's pods, named after the same endpoint.
            applying = uow.audit.actions(f"deployment:{snap.id}", f"deployment.{State.APPLYING.value}")
        since = applying[0][2] if applying else None
        stop = threading.Event()
        with self._lock:
            self._stops[snap.id] = stop
        try:
            outcome = cluster.watch(snap.endpoint, manifest, timeout_seconds=remaining,
                                    on_progress=lambda p: self._progress(snap, p), stop=stop, since=since)
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
        cold = self._cold_start(snap, result)
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            # From here on, every request the candidate finishes beyond kimi-ops's own is a user getting through.
            dep.closed_baseline = baseline.requests_finished if baseline is not None else None
            dep.own_requests = dep.own_uncertain = 0
            if cold is not None:
                uow.events.emit(RolloutProgressEvent(deployment_id=snap.id, endpoint_name=snap.endpoint.name,
                                                     message=f"cold start: {cold.words()}", state=State.READINESS.value),
                                at=self.ctx.clock.now())
            transition(uow, self.ctx, dep, next_state(snap.kind, State.READINESS),
                       reason=f"readiness completion {result.summary}",
                       details={"ttft_ms": result.ttft_ms, "total_ms": result.total_ms,
                                **({"cold_start": cold.as_dict()} if cold is not None else {})})
            uow.commit()

    def _cold_start(self, snap: Snapshot, result: ReadinessResult) -> ColdStart | None:
        """Image pull, weight transfer, load and the first completion of this rollout, where the cluster says."""
        cluster: object = self.ctx.ports.cluster
        if not isinstance(cluster, StartupReader):
            return None
        first = result.total_ms / 1000 if result.total_ms is not None else None
        return cluster.cold_start(snap.endpoint, first)

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
            # Nobody is asked to choose, so the wait pages (once: the incident stays open until users are back), and
            # the thread is given back: a drain that never ends must not hold a worker forever. The next takeover
            # round drains again for up to drain_seconds, and applies once nothing runs.
            with self.ctx.uow() as uow:
                row = uow.endpoints.get(snap.endpoint.name)
                if row is not None and uow.incidents.open_for(row.id, STUCK) is None:  # said once, with the page
                    uow.events.emit(RolloutProgressEvent(
                        deployment_id=snap.id, endpoint_name=snap.endpoint.name, state=State.DRAINING.value,
                        message=f"still draining ({running}); a restore waits until nothing runs and tries again "
                                f"every {self.ctx.settings.lease_takeover_seconds:g} s"), at=self.ctx.clock.now())
                open_stuck_incident(uow, self.ctx, snap.endpoint.name,
                                    f"restore #{snap.id} has not drained after {snap.endpoint.drain_seconds:.0f} s ({running}); "
                                    "it applies nothing while requests may run and keeps waiting")
                uow.commit()
            raise TryLater(f"restore #{snap.id} keeps draining; the next takeover round tries again")
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
        note = "" if report.approvable else "; the evaluation found problems, see its report (the release is restored anyway)"
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            row = store_gate_report(uow, self.ctx, dep, report, announce=False)
            now = self.ctx.clock.now()
            # Recorded, not decided: it becomes the next deploy's production baseline; nobody is asked.
            row.decision, row.decided_by, row.decided_at = "approved", "kimi-ops", now
            row.seen = {"report_hash": row.report_hash, "release_hash": snap.subject.release_hash, "auto": True}
            uow.audit.record(at=now, actor="kimi-ops", action="gate.approved", subject=f"deployment:{dep.id}",
                             details={"gate": "model", "auto": True, "why": f"the {snap.kind}'s evaluation is recorded"})
            transition(uow, self.ctx, dep, State.REOPENING,
                       reason=f"evaluation recorded: {report.summary or report.status}{note}")
            uow.commit()

    def _reopen(self, snap: Snapshot) -> None:
        reason = f"reopened after {snap.kind} #{snap.id}"
        admission = Admission.open()
        if snap.endpoint.pair is not None and snap.kind == "deploy":
            # A pair side's deploy gives users back by sending all weight to the other side, in one route change.
            admission = Admission.closed()
            reason = f"all weight back to {snap.endpoint.pair.partner} after {snap.kind} #{snap.id}"
        try:
            words = apply_admission(self.ctx, snap.endpoint, admission, reason)
        except AdmissionFailed as exc:
            raise StepFailed(str(exc)) from exc
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            record_admission(uow, self.ctx, snap.endpoint.name, admission, reason, actor="kimi-ops",
                             deployment_id=snap.id, words=words)
            if snap.ending is not None or snap.kind == "deploy":
                ending = State(snap.ending or State.CANCELLED)
                back = (f"all weight is back on {snap.endpoint.pair.partner}" if snap.endpoint.pair is not None
                        else "users are back on the running release")
                transition(uow, self.ctx, dep, ending, reason=f"{dep.state_reason or ending.words}; {back}")
            else:
                reopened(uow, self.ctx, snap.endpoint.name)
                transition(uow, self.ctx, dep, State.LIVE, reason=f"{reason}: {words}", details={"admission": "open"})
            uow.commit()

    def _ramp(self, snap: Snapshot) -> None:
        """Users meet the candidate in steps; a step whose soak breaks an objective fails it.

        The failure restores the previous release on a single node, and on a pair side returns all the service's
        weight to the other side in one route change (``end`` → ``reopening``). A restart resumes at the step the
        endpoint row records: that step is applied again (the same weights) and soaked from its start.
        """
        endpoint = snap.endpoint
        with self.ctx.uow() as uow:
            row = uow.endpoints.get(endpoint.name)
            current = row.admission if row is not None else "closed"
        steps = ramp_steps(endpoint.ramp.steps) if endpoint.route is not None else ("open",)
        if current not in steps:
            reach = self._reach(snap, snap.own)
            if reach is not None and reach.users > 0:
                raise StepFailed(f"{reach.users:.0f} requests besides kimi-ops's own {_own_words(reach.own)} reached "
                                 "the candidate while users were closed out")
        step = current if current in steps else next_step(steps, None)
        last: dict[str, Window] = {}
        while step is not None:
            if step != current and needs_approval(step, endpoint.ramp.approval_steps) and not self._ask_approval(snap, step):
                raise WaitingForPerson(f"deployment #{snap.id} waits for an approval of its ramp step {step}")
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
            self._show_split(snap, step, last, next_step=next_step(steps, step))
            last = self._soak(snap, step, admission)
            step = next_step(steps, step)
        with self.ctx.uow() as uow:
            dep = self._locked(uow, snap)
            uow.events.emit(self._split_event(snap, "open", last, outcome="live"), at=self.ctx.clock.now())
            if endpoint.pair is not None:
                # The other side keeps its release warm with no users: `/kimi rollback SERVICE` moves them back.
                record_admission(uow, self.ctx, endpoint.pair.partner, Admission.closed(),
                                 f"{snap.kind} #{snap.id} moved every user to {endpoint.name}", actor="kimi-ops",
                                 deployment_id=snap.id, words=f"no user reaches it; it keeps its release warm for "
                                                              f"`/kimi rollback {endpoint.pair.service}`")
            transition(uow, self.ctx, dep, State.LIVE, reason="ramp complete: everyone reaches Kimi K3"
                       if endpoint.pair is None else f"ramp complete: all of {endpoint.pair.service}'s weight is on "
                       f"{endpoint.name}", details={"admission": "open"})
            uow.commit()
        self._ramp_plot(snap)

    def _ask_approval(self, snap: Snapshot, step: str) -> bool:
        """True when ``step`` was approved; otherwise ask for it in the thread (once) and say False."""
        subject = f"deployment:{snap.id}"
        with self.ctx.uow() as uow:
            if step in ramp_steps_approved(uow, snap.id):
                return True
            self._locked(uow, snap)
            asked = {d.get("step") for _, _, _, d in uow.audit.actions(subject, RAMP_ASKED)}
            if step not in asked:
                now = self.ctx.clock.now()
                uow.audit.record(at=now, actor="kimi-ops", action=RAMP_ASKED, subject=subject, details={"step": step})
                group = snap.endpoint.approver_group
                mention = f"<!subteam^{group}> " if group else ""
                uow.events.emit(RolloutProgressEvent(
                    deployment_id=snap.id, endpoint_name=snap.endpoint.name, state=State.RAMPING.value,
                    message=f"{mention}the ramp holds before {step}: an approver answers `/kimi ramp approve {snap.id} "
                            f"{step}` to go on, or `/kimi cancel {snap.id}` to give users back"), at=now)
                uow.commit()
        return False

    def _split_event(self, snap: Snapshot, step: str, windows: dict[str, Window], *, next_step: str | None = None,
                     next_at: dt.datetime | None = None, outcome: str | None = None) -> RampSplit:
        """The route's backends at ``step`` (the candidate first) with each one's last soak window."""
        endpoint, admission = snap.endpoint, parse_admission(step)
        route = endpoint.route
        rest = (snap.partner.name if snap.partner is not None else route.fallback.name
                if route is not None and route.fallback is not None else "nobody (the gateway's 500)")
        percent = admission.percent_for(cohort=False)
        sides = []
        for name, weight, cohort in ((endpoint.name, percent, admission.cohort_admitted),
                                     (rest, 100 - percent, not admission.cohort_admitted)):
            side: dict[str, Any] = {"name": name, "weight": weight, "cohort": cohort}
            window = windows.get(name)
            if window is not None:
                side |= {"requests": window.requests, "ttft_p99_ms": window.ttft_p99_ms,
                         "error_rate": window.errors / window.requests if window.requests else 0.0}
            sides.append(side)
        return RampSplit(deployment_id=snap.id, endpoint_name=endpoint.name, step=step, sides=tuple(sides),
                         next_step=next_step, next_at=next_at, outcome=outcome)

    def _ramp_plot(self, snap: Snapshot) -> None:
        """The PNG of the ramp from its stored split messages (a resumed ramp's earlier steps included); best effort."""
        try:
            with self.ctx.uow() as uow:
                points = [{"at": row.at, "sides": list(event.sides)} for row in uow.events.for_deployment(snap.id)
                          if row.kind == RampSplit.KIND and isinstance(event := event_of(row), RampSplit)]
            if len(points) < 2:
                return
            title = f"Ramp of {snap.endpoint.name} · deployment #{snap.id}"
            path = self.ctx.settings.data_dir / "reports" / f"ramp-{snap.endpoint.name}-{snap.id}.png"
            plot = plot_ramp(points, path, title)
            with self.ctx.uow() as uow:
                uow.events.emit(RampPlot(deployment_id=snap.id, endpoint_name=snap.endpoint.name, path=plot["path"],
                                         sha256=plot["sha256"], title=title), at=self.ctx.clock.now())
                uow.commit()
        except Exception:  # the thread's message has the numbers; a missing picture never fails a ramp
            log.warning("deployment #%s: the ramp's plot could not be drawn", snap.id, exc_info=True)

    def _show_split(self, snap: Snapshot, step: str, windows: dict[str, Window], *, next_step: str | None) -> None:
        now = self.ctx.clock.now()
        event = self._split_event(snap, step, windows, next_step=next_step,
                                  next_at=now + dt.timedelta(seconds=snap.endpoint.ramp.soak_seconds))
        with self.ctx.uow() as uow:
            uow.events.emit(event, at=now)
            uow.commit()

    def _soak(self, snap: Snapshot, step: str, admission: Admission) -> dict[str, Window]:
        """Hold one step for its soak while /metrics is sampled on each side users are on; any breach fails it."""
        ramp = snap.endpoint.ramp
        sides = [snap.endpoint] + ([snap.partner] if snap.partner is not None else [])
        before = {side.name: self._metrics(snap, side) for side in sides}
        unread = [name for name, m in before.items() if m is None]
        if unread:
            raise StepFailed(f"ramp step {step}: the /metrics of {', '.join(unread)} cannot be read, so the objectives "
                             "cannot be checked")
        first = {name: m for name, m in before.items() if m is not None}
        after = dict(first)
        peaks = {name: (m.waiting, m.kv_cache_usage) for name, m in first.items()}
        stop = threading.Event()
        with self._lock:
            self._stops[snap.id] = stop
            if self._closing:  # a stop that came between two steps, before this soak could hear it
                stop.set()
        started = time.monotonic()
        try:
            while (left := ramp.soak_seconds - (time.monotonic() - started)) > 0:
                if stop.wait(min(ramp.sample_seconds, left)):
                    raise StateMoved("ramp soak stopped")
                for side in sides:
                    sample = self._metrics(snap, side)
                    if sample is None:
                        continue
                    after[side.name] = sample
                    waiting, kv = peaks[side.name]
                    peaks[side.name] = (max(waiting or 0.0, sample.waiting or 0.0), max(kv or 0.0, sample.kv_cache_usage or 0.0))
        finally:
            with self._lock:
                self._stops.pop(snap.id, None)
        checker = self.ctx.ports.objectives or RampObjectives()
        broken: list[str] = []
        seen: list[str] = []
        windows: dict[str, Window] = {}
        for side in sides:
            final = self._metrics(snap, side) or after[side.name]
            window = windows[side.name] = window_between(
                first[side.name], final, own_requests=0, seconds=time.monotonic() - started,
                peak_waiting=peaks[side.name][0], peak_kv_cache_usage=peaks[side.name][1])
            label = f"{side.name}: " if len(sides) > 1 else ""
            broken += [f"{label}{b}" for b in checker.breaches(side, window)]
            seen.append(f"{label}{window_summary(window)}")
        if broken:
            why = f"ramp step {step} broke its objectives: {'; '.join(broken)} ({'; '.join(seen)})"
            back = (f"all weight goes back to {snap.partner.name}" if snap.partner is not None
                    else "the previous release is restored")
            with self.ctx.uow() as uow:
                uow.events.emit(self._split_event(snap, step, windows, outcome=f"{why}; {back}"), at=self.ctx.clock.now())
                uow.commit()
            self._ramp_plot(snap)
            raise StepFailed(why)
        self._progress(snap, RolloutProgress(f"ramp step {step} held: {'; '.join(seen)}", "ramping"))
        return windows

    def recheck(self, deployment_id: int, gate: str, actor: Identity) -> DeploymentView:
        """Run a waiting gate's checks again (the only way past a failed or errored check besides rejecting)."""
        authorize(self.ctx, actor, "recheck", f"deployment:{deployment_id}")
        with self.ctx.uow() as uow:
            dep = uow.deployments.get(deployment_id)
            if dep is None:
                raise NotFound(f"no deployment #{deployment_id}")
            if State(dep.state).gate != gate:
                raise Refused(f"the {gate} gate of deployment #{deployment_id} is not waiting (the deployment is {dep.state})")
        hold = self._acquire(deployment_id)
        if hold is None:  # one gate run per endpoint at a time, across replicas
            raise Refused(f"deployment #{deployment_id} is being worked on right now; recheck once its gate waits again")
        try:
            self._recheck(deployment_id, gate, actor)
        finally:
            self._release(hold)
        return get_deployment(self.ctx, deployment_id)

    def _recheck(self, deployment_id: int, gate: str, actor: Identity) -> None:
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
            _add_own(dep, sent)
            store_gate_report(uow, self.ctx, dep, report, actor=actor.user_id)
            uow.commit()

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
            views.append(self.resume(deployment_id))  # alive elsewhere: a start-up never touches it
        return views

    def resume(self, deployment_id: int) -> DeploymentView:
        """Take one deployment over (its lease lapsed): exactly what a restart does for it, if nobody else has yet."""
        hold = self._acquire(deployment_id)
        if hold is None:
            return get_deployment(self.ctx, deployment_id)
        try:
            return self._resume(deployment_id)
        finally:
            self._release(hold)

    def _resume(self, deployment_id: int) -> DeploymentView:
        """Continue one in-flight deployment under the lease this thread holds, or mark it interrupted."""
        why = self._unresumable(deployment_id)
        if why is not None:
            self._interrupt(deployment_id, why)
            return get_deployment(self.ctx, deployment_id)
        try:
            return self.advance(deployment_id)
        except Exception:
            # Not the stored state (checked above) but e.g. the database going away: a later resume may succeed,
            # so the deployment keeps its endpoint rather than being ended by a transient fault.
            log.exception("could not resume deployment #%s", deployment_id)
            return get_deployment(self.ctx, deployment_id)

    def _unresumable(self, deployment_id: int) -> str | None:
        """Why the stored state of a deployment cannot be continued, or ``None`` when it can."""
        with self.ctx.uow() as uow:
            dep = uow.deployments.get(deployment_id)
            if dep is None or State(dep.state).terminal:
                return None
            try:
                snap = _snapshot(uow, dep)
            except Exception as exc:  # e.g. a release stored by a version whose tuple this one refuses
                if store_unavailable(exc):
                    raise  # the database went away while reading: nothing is known to be wrong with the state
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


def _waits_for_person(uow: SqlUnitOfWork, dep: Deployment) -> bool:
    """A gate whose report awaits a decision, a stalled drain, or a ramp step asked and not yet approved."""
    state = State(dep.state)
    if state == State.RAMPING:
        return ramp_step_waiting(uow, dep.id) is not None
    if state not in WAITING:
        return False
    if state.gate is None:
        return True
    latest = uow.gates.latest(dep.id, state.gate)
    return latest is not None and latest.decision is None


def _requests_sent(report: GateReport) -> OwnRequests:
    """Requests a gate's run sent to the endpoint (evaluation cases, the sweep's), as the finished counter sees them."""
    sent = OwnRequests()
    for part, key in (("evaluation", "cases"), ("sweep", "requests")):
        attachment = report.attachments.get(part) or {}
        own = attachment.get("own_requests")
        if isinstance(own, dict):
            sent += OwnRequests(int(own.get("answered") or 0), int(own.get("uncertain") or 0))
        elif attachment:
            # A report from before requests were classed: none of them is known to have been answered.
            raw = attachment.get(key)
            sent += OwnRequests(0, len(raw) if isinstance(raw, list) else int(raw or 0))
    return sent


def _add_own(dep: Deployment, sent: OwnRequests) -> None:
    dep.own_requests = (dep.own_requests or 0) + sent.answered
    dep.own_uncertain = (dep.own_uncertain or 0) + sent.uncertain


def _own_words(own: OwnRequests) -> str:
    """``12 answered`` or ``12 answered and 3 broken`` for a closed-door reason."""
    return f"{own.answered} answered" + (f" and {own.uncertain} broken" if own.uncertain else "")


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
