"""The engine's driver: runs a deployment's steps until it waits for a person or ends.

Each state that needs work has its step in :data:`STEPS`; a step reads the persisted state, does its slow work
(checks, apply, rollout watch, readiness) outside any transaction, then moves the state machine in one
transaction (:mod:`bot.services.engine.run`). The driver turns a step's outcome into what comes next: another
step, a wait for a person, a failure recorded (which restores the previous release when the candidate may be on
the cluster), or handing the deployment back (its lease lapses for a takeover).

A deployment is driven only under its endpoint's lease (:mod:`bot.services.engine.leases`); an advance that
finds it driven elsewhere returns the current view without acting. After a crash, :meth:`Engine.resume_all`
picks every in-flight deployment up from its stored state (:mod:`bot.services.engine.recovery`).
"""

from __future__ import annotations

import os
import socket
import uuid

from bot.adapters.store.errors import store_unavailable
from bot.domain.read_models import DeploymentView
from bot.domain.states import State, next_state
from bot.logs import logger_for
from bot.services.access import Identity, authorize
from bot.services.context import Context
from bot.services.deployments import get_deployment
from bot.services.engine.apply import apply, evaluation, readiness, rollout
from bot.services.engine.exposure import close, drain, reopen
from bot.services.engine.gates import gate, recheck_gate
from bot.services.engine.leases import Hold, Leases
from bot.services.engine.ramp import ramp
from bot.services.engine.recovery import Resumption, left_to_its_driver, resume_one, waits_for_a_person
from bot.services.engine.run import (
    LeaseLost,
    Runner,
    Snapshot,
    StateMoved,
    Step,
    StepFailed,
    TryLater,
    WaitingForPerson,
    snapshot,
)
from bot.services.errors import NotConfigured, NotFound, Refused, Unavailable, UserError
from bot.services.transitions import deployment_view, end

log = logger_for(__name__)

READINESS_PAUSE_SECONDS = 2.0


def _start(runner: Runner, snap: Snapshot) -> None:
    """A request was accepted: its path's first step starts (a gate's checks, or a restore's closing)."""
    runner.move(snap, next_state(snap.kind, snap.state))


STEPS: dict[State, Step] = {
    State.REQUESTED: _start,
    State.ARTIFACT_GATE: gate,
    State.INFRASTRUCTURE_GATE: gate,
    State.MODEL_GATE: gate,
    State.TRAFFIC_GATE: gate,
    State.CLOSING: close,
    State.DRAINING: drain,
    State.APPLYING: apply,
    State.ROLLING_OUT: rollout,
    State.READINESS: readiness,
    State.EVALUATION: evaluation,
    State.RAMPING: ramp,
    State.REOPENING: reopen,
}
"""The step of each in-flight state; ``drain_stalled`` has none (a person chooses: wait longer, or abort)."""


class Engine:
    """Runs deployments; one instance per process (the Slack app, the CLI, the sandbox)."""

    def __init__(self, ctx: Context, *, readiness_pause: float = READINESS_PAUSE_SECONDS, holder: str | None = None) -> None:
        self.ctx = ctx
        self.readiness_pause = readiness_pause
        # Unique per process (pod name, pid and a suffix): two processes on one host never share a lease.
        self.holder = holder or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._runner = Runner(ctx, self.holder, readiness_pause)
        self._leases = Leases(ctx, self.holder, on_lost=self._runner.stop, on_states=self._runner.stop_moved)

    def stop(self, deployment_id: int) -> None:
        """Ask a running rollout watch of this deployment to stop (explicitly, never by hanging)."""
        self._runner.stop(deployment_id)

    def stop_all(self) -> None:
        """Shutting down: stop every watch and soak, and drive no further step (the leases lapse for a takeover)."""
        self._runner.stop_all()

    def lapsed(self) -> list[int]:
        """In-flight deployments nobody drives (their lease lapsed), for this replica to take over."""
        return self._leases.lapsed()

    # ------------------------------------------------------------------ the loop
    def advance(self, deployment_id: int) -> DeploymentView:
        """Run steps until the deployment waits for a decision or ends; return where it stands.

        Only under its endpoint's lease: when another replica (or thread) drives it, the view is returned as it is.
        """
        if self._runner.closing:
            return get_deployment(self.ctx, deployment_id)
        hold = self._leases.acquire(deployment_id)
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
            self._leases.release(hold)

    def _drive(self, deployment_id: int, hold: Hold) -> DeploymentView:
        while True:
            if hold.lost.is_set() or self._runner.closing:
                return get_deployment(self.ctx, deployment_id)
            restore_id: int | None = None
            # One read a step: the deployment as it stands, in the transaction that takes its snapshot.
            with self.ctx.uow() as uow:
                dep = uow.deployments.get(deployment_id)
                if dep is None:
                    raise UserError(f"no deployment #{deployment_id}")
                if State(dep.state).terminal:
                    ended = deployment_view(uow, dep)
                    holder = uow.deployments.in_flight(dep.endpoint_id)
                    restore_id = holder.id if holder is not None and holder.cause_id == dep.id else None
                    snap = None
                elif dep.state == State.DRAIN_STALLED:
                    return deployment_view(uow, dep)  # waiting for a person to choose: wait longer, or abort
                else:
                    waits_at = State(dep.state).gate
                    latest = uow.gates.latest(dep.id, waits_at) if waits_at else None
                    if waits_at and latest is not None and latest.decision is None:
                        return deployment_view(uow, dep)  # waiting for a person
                    snap = snapshot(uow, dep, latest)
            if snap is None:
                if restore_id is not None:
                    self.advance(restore_id)  # it ended after its apply (reject, cancel, expiry): drive its restore
                return ended
            try:
                step = STEPS.get(snap.state)
                if step is None:
                    raise StepFailed(f"no step is defined for state {snap.state}")
                step(self._runner, snap)
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
                dep = self._runner.locked(uow, snap)
                end(uow, self.ctx, dep, State.FAILED, reason=reason)
                uow.commit()
        except StateMoved:
            log.info("deployment #%s moved on (e.g. cancelled) before its failure could be recorded: %s", snap.id, reason)

    # ------------------------------------------------------------------ a person's recheck
    def recheck(self, deployment_id: int, gate: str, actor: Identity) -> DeploymentView:
        """Run a waiting gate's checks again (the only way past a failed or errored check besides rejecting)."""
        authorize(self.ctx, actor, "recheck", f"deployment:{deployment_id}")
        self._waiting_gate(deployment_id, gate)
        hold = self._leases.acquire(deployment_id)
        if hold is None:  # one gate run per endpoint at a time, across replicas
            raise Refused(f"deployment #{deployment_id} is being worked on right now; recheck once its gate waits again")
        try:
            recheck_gate(self._runner, self._waiting_gate(deployment_id, gate), gate, actor)
        finally:
            self._leases.release(hold)
        return get_deployment(self.ctx, deployment_id)

    def _waiting_gate(self, deployment_id: int, gate: str) -> Snapshot:
        with self.ctx.uow() as uow:
            dep = uow.deployments.get(deployment_id)
            if dep is None:
                raise NotFound(f"no deployment #{deployment_id}")
            if State(dep.state).gate != gate:
                raise Refused(f"the {gate} gate of deployment #{deployment_id} is not waiting (the deployment is {dep.state})")
            return snapshot(uow, dep)

    # ------------------------------------------------------------------ recovery
    def resume_all(self) -> list[DeploymentView]:
        """After a restart: continue every in-flight deployment from its stored state (alive elsewhere: untouched)."""
        return [done.view for done in self.resume_each()]

    def resume_each(self) -> list[Resumption]:
        """:meth:`resume_all`, saying for each deployment whether this process took it, or why it left it."""
        with self.ctx.uow() as uow:
            ids = [d.id for d in uow.deployments.all_in_flight()]
        done = []
        for deployment_id in ids:
            waiting = waits_for_a_person(self.ctx, deployment_id)
            hold = self._leases.acquire(deployment_id)
            if hold is None:
                done.append(left_to_its_driver(self.ctx, deployment_id))
                continue
            try:  # one that waits for a person is still checked: a stored state that cannot go on is interrupted
                view = resume_one(self.ctx, deployment_id, self.advance)
            finally:
                self._leases.release(hold)
            done.append(Resumption(view, taken=not waiting, waits_for_person=waiting))
        return done

    def resume(self, deployment_id: int) -> DeploymentView:
        """Take one deployment over (its lease lapsed): exactly what a restart does for it, if nobody else has yet."""
        hold = self._leases.acquire(deployment_id)
        if hold is None:
            return get_deployment(self.ctx, deployment_id)
        try:
            return resume_one(self.ctx, deployment_id, self.advance)
        finally:
            self._leases.release(hold)
