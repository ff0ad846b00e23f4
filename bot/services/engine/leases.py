"""Who drives a deployment: this replica's leases on endpoints, their heartbeats, and the lapsed ones to take over.

With several replicas, a deployment is driven by one at a time: the engine claims its endpoint's lease
(:mod:`bot.adapters.store.leases`) before driving, a heartbeat thread renews it while a step runs, and every
move re-checks under a row lock that the lease is still this engine's (:meth:`Runner.locked`).
:meth:`Leases.lapsed` names the in-flight deployments whose driver stopped renewing, for any replica to take over.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from bot.adapters.store.models import Deployment
from bot.adapters.store.uow import SqlUnitOfWork
from bot.domain.states import WAITING, State
from bot.logs import logger_for
from bot.services.context import Context
from bot.services.errors import NotFound
from bot.services.limits_apply import limits_step
from bot.services.ramp_approvals import ramp_step_waiting

log = logger_for(__name__)


def wall() -> dt.datetime:
    # Leases are real time on every replica (the heartbeat sleeps real seconds), whatever clock the services use.
    return dt.datetime.now(dt.UTC)


@dataclass
class Hold:
    """This engine's lease on one endpoint: the thread driving under it, how deeply (a restore nests), its heartbeat."""

    endpoint_id: int
    thread: int
    depth: int = 1
    deployments: set[int] = field(default_factory=set)
    done: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)


class Leases:
    """The leases this engine holds; ``on_lost`` is told each deployment whose lease another replica took, and
    ``on_states``, at each heartbeat, the stored states of the deployments driven under a lease (a move made
    elsewhere, such as a cancel, shows there within one heartbeat)."""

    def __init__(self, ctx: Context, holder: str, on_lost: Callable[[int], None],
                 on_states: Callable[[dict[int, str]], None] | None = None) -> None:
        self.ctx = ctx
        self.holder = holder
        self._on_lost = on_lost
        self._on_states = on_states
        self._holds: dict[int, Hold] = {}
        self._lock = threading.Lock()

    def acquire(self, deployment_id: int) -> Hold | None:
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
            hold = self._holds[endpoint_id] = Hold(endpoint_id, me, deployments={deployment_id})
        try:
            now = wall()
            with self.ctx.uow() as uow:
                won = uow.leases.claim(endpoint_id, deployment_id, self.holder, now, now + self._length())
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

    def release(self, hold: Hold) -> None:
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
                uow.leases.release(hold.endpoint_id, self.holder, wall())
                uow.commit()
        except Exception:  # it lapses by itself within lease_seconds
            log.warning("could not release the lease of endpoint %s", hold.endpoint_id, exc_info=True)

    def _forget(self, hold: Hold) -> None:
        with self._lock:
            if self._holds.get(hold.endpoint_id) is hold:
                del self._holds[hold.endpoint_id]

    def _length(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.ctx.settings.lease_seconds)

    def _heartbeat(self, hold: Hold) -> None:
        """Renew the lease while its holder drives; on losing it, stop the rollout watch or soak that runs."""
        while not hold.done.wait(self.ctx.settings.lease_heartbeat_seconds):
            try:
                with self.ctx.uow() as uow:
                    kept = uow.leases.renew(hold.endpoint_id, self.holder, wall() + self._length())
                    uow.commit()
                    states = {d: dep.state for d in list(hold.deployments)
                              if (dep := uow.deployments.get(d)) is not None}
            except Exception:  # the database is away: keep trying; the fenced moves refuse if another took over
                log.warning("could not renew the lease of endpoint %s", hold.endpoint_id, exc_info=True)
                continue
            if not kept:
                log.warning("lease of endpoint %s taken over by another replica; this one stops driving", hold.endpoint_id)
                hold.lost.set()
                for deployment_id in list(hold.deployments):
                    self._on_lost(deployment_id)
                return
            if self._on_states is not None:
                self._on_states(states)

    def lapsed(self) -> list[int]:
        """In-flight deployments nobody drives: their lease lapsed (a crash, a stop) and no person is to act.

        A deployment whose state moved within the last lease length under another deployment's (or no) lease row
        is left to the replica that just moved it, which is about to claim it itself.
        """
        now = wall()
        recent = now - self._length()
        found: list[int] = []
        with self.ctx.uow() as uow:
            for dep in uow.deployments.all_in_flight():
                lease = uow.leases.get(dep.endpoint_id)
                if lease is not None and lease.expires_at > now:
                    continue
                if dep.updated_at > recent and (lease is None or lease.deployment_id != dep.id):
                    continue
                if waits_for_person(uow, dep):
                    continue
                found.append(dep.id)
        with self._lock:
            local = {d for hold in self._holds.values() for d in hold.deployments}
        return [d for d in found if d not in local]


def waits_for_person(uow: SqlUnitOfWork, dep: Deployment) -> bool:
    """A gate whose report awaits a decision, a stalled drain, or a ramp step asked and not yet approved."""
    state = State(dep.state)
    if state == State.RAMPING:
        # Limits accepted while it held before a step: the ramp has work to do first (close, drain, apply, readiness).
        return ramp_step_waiting(uow, dep.id) is not None and limits_step(uow, dep.id) is None
    if state not in WAITING:
        return False
    if state.gate is None:
        return True
    latest = uow.gates.latest(dep.id, state.gate)
    return latest is not None and latest.decision is None
