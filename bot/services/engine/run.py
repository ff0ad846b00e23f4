"""What every step works with: the deployment's snapshot, moves under the row lock, and the step outcomes.

A step reads a :class:`Snapshot` (the persisted state, read in one transaction), does its slow work outside any
transaction, then moves the state machine through :meth:`Runner.move` or under :meth:`Runner.locked`, which
re-checks under the row lock that the state is still the one read and that this replica still holds the
endpoint's lease. A step ends by returning (it moved the state) or by raising one of the outcomes below, which
the driver (:mod:`bot.services.engine.driver`) turns into the next thing to do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bot.adapters.store.models import Deployment, GateResult
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.chat_text import literal
from bot.domain.events import RolloutProgress as RolloutProgressEvent
from bot.domain.own_requests import OwnRequests
from bot.domain.readiness import MetricsSnapshot
from bot.domain.rollout import RolloutProgress
from bot.domain.states import State
from bot.logs import logger_for
from bot.services.context import Context, require
from bot.services.gates import GateSubject
from bot.services.releases import manifest_from_row
from bot.services.transitions import live_deployment, path_kind, transition

READINESS_ATTEMPTS = 3
"""Readiness completions tried (a pause apart) before a readiness step fails."""

log = logger_for(__name__)


# ---------------------------------------------------------------------------- step outcomes
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


# ---------------------------------------------------------------------------- the snapshot
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
    gate_checked: bool = False  # the state's gate has a stored report (its checks ran)
    gate_decision: str | None = None  # that report's decision, once a person (or kimi-ops) made it


def snapshot(uow: SqlUnitOfWork, dep: Deployment, latest: GateResult | None = None) -> Snapshot:
    """The deployment as stored; ``latest`` is the newest report of the gate its state waits at, if read already."""
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
        gate_checked=latest is not None,
        gate_decision=latest.decision if latest is not None else None,
    )


# ---------------------------------------------------------------------------- the runner
class Runner:
    """One engine's means for its steps: the context, its lease holder name, and the stop signals of the watches
    and soaks running now (a cancel, a lost lease or a shutdown sets them)."""

    def __init__(self, ctx: Context, holder: str, readiness_pause: float) -> None:
        self.ctx = ctx
        self.holder = holder
        self.readiness_pause = readiness_pause
        self.closing = False
        self._stops: dict[int, tuple[threading.Event, State]] = {}  # a watch or soak running: its stop, its state
        self._lock = threading.Lock()

    def locked(self, uow: SqlUnitOfWork, snap: Snapshot) -> Deployment:
        """The deployment locked for this transaction, still in ``snap``'s state and under this replica's lease."""
        dep = uow.deployments.get_for_update(snap.id)
        if dep is None or dep.state != snap.state:
            raise StateMoved(f"deployment #{snap.id} moved from {snap.state} to {dep.state if dep else 'nowhere'}")
        # Fencing: the lease row is locked with the deployment, so a replica that took over cannot claim it between
        # this check and the commit, and a driver that lost its lease never moves the state.
        if not uow.leases.holds(dep.endpoint_id, self.holder):
            raise LeaseLost(f"deployment #{snap.id}: the lease of its endpoint is held by another replica")
        return dep

    def move(self, snap: Snapshot, target: str, reason: str | None = None, **details: object) -> None:
        with self.ctx.uow() as uow:
            dep = self.locked(uow, snap)
            transition(uow, self.ctx, dep, target, reason=reason, details=details or None)
            uow.commit()

    def progress(self, snap: Snapshot, progress: RolloutProgress) -> None:
        """A step line for the thread; the rollout watch's carry the cluster's words (pod events, conditions), so
        the line is made literal for Slack (a terminal shows it as typed)."""
        with self.ctx.uow() as uow:
            uow.events.emit(RolloutProgressEvent(deployment_id=snap.id, endpoint_name=snap.endpoint.name,
                                                 message=literal(progress.message),
                                                 state=progress.state), at=self.ctx.clock.now())
            uow.commit()

    def metrics(self, snap: Snapshot, endpoint: EndpointSettings | None = None) -> MetricsSnapshot | None:
        """The /metrics of ``endpoint`` (the deployment's own by default), or ``None`` when they cannot be read."""
        return self.metrics_or_why(snap, endpoint)[0]

    def metrics_or_why(self, snap: Snapshot,
                       endpoint: EndpointSettings | None = None) -> tuple[MetricsSnapshot | None, str]:
        """The /metrics of ``endpoint`` and ``""``, or ``None`` and why they cannot be read (one line)."""
        try:
            return require(self.ctx.ports.endpoint, "endpoint access").metrics(endpoint or snap.endpoint), ""
        except Exception as exc:
            log.warning("deployment #%s: /metrics of %s unreadable", snap.id, (endpoint or snap.endpoint).name,
                        exc_info=True)
            text = " ".join(str(exc).split())[:200] or type(exc).__name__
            return None, text

    @contextmanager
    def stoppable(self, snap: Snapshot) -> Iterator[threading.Event]:
        """The stop signal of a watch or soak of ``snap``'s deployment for as long as it runs in ``snap``'s state."""
        stop = threading.Event()
        with self._lock:
            self._stops[snap.id] = (stop, snap.state)
            if self.closing:  # a stop that came between two steps, before this watch could hear it
                stop.set()
        try:
            yield stop
        finally:
            with self._lock:
                self._stops.pop(snap.id, None)

    def stop(self, deployment_id: int) -> None:
        """Ask a running rollout watch or soak of this deployment to stop (explicitly, never by hanging)."""
        with self._lock:
            running = self._stops.get(deployment_id)
        if running is not None:
            running[0].set()

    def stop_moved(self, states: dict[int, str]) -> None:
        """Stop each watch or soak whose deployment is no longer in the state it runs for (``states``: as stored now).

        A cancel, a reject or an expiry decided on another replica moves the state without this one knowing; its
        lease heartbeat reads the states and tells it here, so a watch that may never end gives way at once.
        """
        with self._lock:
            moved = [(d, stop) for d, (stop, state) in self._stops.items() if d in states and states[d] != state]
        for deployment_id, stop in moved:
            log.info("deployment #%s moved to %s elsewhere; its watch stops", deployment_id, states[deployment_id])
            stop.set()

    def stop_all(self) -> None:
        """Shutting down: stop every watch and soak; the driver drives no further step."""
        self.closing = True
        with self._lock:
            for stop, _ in self._stops.values():
                stop.set()


Step = Callable[[Runner, Snapshot], None]
"""A step: does the slow work of ``snap``'s state, then moves the state or raises an outcome."""
