"""The exposure steps: close users out, drain what runs, and reopen (or give all weight back to a pair's other side).

Users meet nothing new between ``closing`` and ``reopening``/``ramping``: the route sends them to the fallback
(or the gateway's unavailable answer) while the candidate is applied and checked.
"""

from __future__ import annotations

from bot.config import EndpointSettings
from bot.domain.admission import Admission
from bot.domain.events import DrainStalled
from bot.domain.events import RolloutProgress as RolloutProgressEvent
from bot.domain.states import State
from bot.logs import logger_for
from bot.services.admission import (
    STUCK,
    AdmissionFailed,
    apply_admission,
    open_stuck_incident,
    record_admission,
    reopened,
)
from bot.services.alert_rules import apply_after_go_live
from bot.services.context import Context, require
from bot.services.engine.run import Runner, Snapshot, StateMoved, StepFailed, TryLater
from bot.services.reservations import reservation_for
from bot.services.transitions import transition

log = logger_for(__name__)


def close(runner: Runner, snap: Snapshot) -> None:
    ctx = runner.ctx
    reason = f"closed for {snap.kind} #{snap.id}"
    try:
        words = apply_admission(ctx, snap.endpoint, Admission.closed(), reason)
    except AdmissionFailed as exc:
        raise StepFailed(str(exc)) from exc
    left = _reservation_left(ctx, snap.endpoint)
    with ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        record_admission(uow, ctx, snap.endpoint.name, Admission.closed(), reason, actor="kimi-ops",
                         deployment_id=snap.id, words=f"{words}{left}")
        transition(uow, ctx, dep, State.DRAINING, reason=f"users closed out: {words}{left}",
                   details={"admission": "closed"})
        uow.commit()


def drain(runner: Runner, snap: Snapshot) -> None:
    ctx = runner.ctx
    client = require(ctx.ports.endpoint, "endpoint access")
    elapsed = max(0.0, ctx.clock.now().timestamp() - snap.entered_at_epoch)
    remaining = snap.endpoint.drain_seconds if snap.kind == "restore" else max(1.0, snap.endpoint.drain_seconds - elapsed)
    with runner.stoppable(snap) as stop:  # a cancel elsewhere ends the wait at once: reopening needs no empty queue
        drained, last = client.drain(snap.endpoint, timeout_seconds=remaining, stop=stop)
        if not drained and stop.is_set():
            raise StateMoved(f"deployment #{snap.id}: its drain stopped (it moved on elsewhere)")
    if drained:
        runner.move(snap, State.APPLYING, "queue drained: no running or waiting requests", drained=True)
        return
    running = f"{(last.running or 0):.0f} running, {(last.waiting or 0):.0f} waiting" if last else "metrics unavailable"
    if snap.kind == "restore":
        # Users are closed out and the candidate is what runs: waiting is always safer than applying over requests.
        # Nobody is asked to choose, so the wait pages (once: the incident stays open until users are back), and
        # the thread is given back: a drain that never ends must not hold a worker forever. The next takeover
        # round drains again for up to drain_seconds, and applies once nothing runs.
        with ctx.uow() as uow:
            row = uow.endpoints.get(snap.endpoint.name)
            if row is not None and uow.incidents.open_for(row.id, STUCK) is None:  # said once, with the page
                uow.events.emit(RolloutProgressEvent(
                    deployment_id=snap.id, endpoint_name=snap.endpoint.name, state=State.DRAINING.value,
                    message=f"still draining ({running}); a restore waits until nothing runs and tries again "
                            f"every {ctx.settings.lease_takeover_seconds:g} s"), at=ctx.clock.now())
            open_stuck_incident(uow, ctx, snap.endpoint.name,
                                f"restore #{snap.id} has not drained after {snap.endpoint.drain_seconds:.0f} s ({running}); "
                                "it applies nothing while requests may run and keeps waiting")
            uow.commit()
        raise TryLater(f"restore #{snap.id} keeps draining; the next takeover round tries again")
    group = snap.endpoint.approver_group
    mention = f"<!subteam^{group}> " if group else ""
    with ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        transition(uow, ctx, dep, State.DRAIN_STALLED, reason=f"drain deadline passed ({running}); nothing applied")
        uow.events.emit(DrainStalled(
            deployment_id=snap.id, endpoint_name=snap.endpoint.name, running=last.running if last else None,
            waiting=last.waiting if last else None,
            text=f"{mention}Requests still run on {snap.endpoint.name} after {snap.endpoint.drain_seconds:.0f} s "
                 f"({running}); nothing was applied. Wait longer: `/kimi drain wait {snap.id}`; "
                 f"or abort and reopen: `/kimi drain abort {snap.id}`."), at=ctx.clock.now())
        uow.commit()


def reopen(runner: Runner, snap: Snapshot) -> None:
    ctx = runner.ctx
    reason = f"reopened after {snap.kind} #{snap.id}"
    admission = Admission.open()
    if snap.endpoint.pair is not None and snap.kind == "deploy":
        # A pair side's deploy gives users back by sending all weight to the other side, in one route change.
        admission = Admission.closed()
        reason = f"all weight back to {snap.endpoint.pair.partner} after {snap.kind} #{snap.id}"
    try:
        words = apply_admission(ctx, snap.endpoint, admission, reason)
    except AdmissionFailed as exc:
        raise StepFailed(str(exc)) from exc
    went_live = snap.ending is None and snap.kind != "deploy"
    with ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        record_admission(uow, ctx, snap.endpoint.name, admission, reason, actor="kimi-ops",
                         deployment_id=snap.id, words=words)
        if not went_live:
            ending = State(snap.ending or State.CANCELLED)
            back = (f"all weight is back on {snap.endpoint.pair.partner}" if snap.endpoint.pair is not None
                    else "users are back on the running release")
            transition(uow, ctx, dep, ending, reason=f"{dep.state_reason or ending.words}; {back}")
        else:
            reopened(uow, ctx, snap.endpoint.name)
            transition(uow, ctx, dep, State.LIVE, reason=f"{reason}: {words}", details={"admission": "open"})
        uow.commit()
    if went_live:
        apply_after_go_live(ctx, snap.endpoint.name, snap.id)  # the alerts' release label: the rolled-back-to release


def _reservation_left(ctx: Context, endpoint: EndpointSettings) -> str:
    """``; its reservation ends in 3 d 4 h`` for the closing announcement, or nothing when none is known."""
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
