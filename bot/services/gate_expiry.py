"""Gate expiry: a gate, a stalled drain or a held ramp step nobody decides reminds its approvers at half-time and
ends at expiry.

:func:`watch_gates` looks at every deployment waiting for a person: a gate
with a report and no decision, ``drain_stalled``, or a ramp holding before a
step that needs an approval (``ramp.approval_steps``). It started waiting when
the gate's latest report was checked (a recheck restarts the clock), when the
drain stalled, or when the step's approval was asked. It may wait the endpoint's ``gate_wait_before_apply_minutes``
while users are still served by the running release, and only
``gate_wait_after_apply_minutes`` once they are closed out. The timing rules
are :class:`bot.domain.gate_deadlines.GateClock`.

Each deployment is handled in its own transaction under its row lock, the same
lock a gate decision takes, so a decision committed first wins and an expiry
committed first makes the decision refused as "not waiting". The reminder is
stored with the gate report (``gate_results.reminded_at``; for a stalled drain or
a ramp step, the ``gate.reminded`` audit row since it began waiting), so a restart or another
replica never reminds twice. An expiry goes through
:func:`bot.services.transitions.end`: before apply the deployment ends and
frees its endpoint; a deploy that closed users out but applied nothing reopens
first; after apply the previous release's restore starts in the same
transaction, and a pair side's deploy (a ramp step included) returns all the
service's weight to the other side, as an aborted ramp does. The returned report names the deployments the engine must then
drive (``to_drive``): the job does that after the transactions committed.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from bot.adapters.store.models import Deployment
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.events import GateReminder
from bot.domain.gate_deadlines import Due, GateClock, words
from bot.domain.states import USERS_CLOSED_OUT, WAITING, State, is_past_apply
from bot.logs import logger_for
from bot.services.context import Context
from bot.services.ramp_approvals import ramp_step_waiting
from bot.services.transitions import end, live_deployment, path_kind

log = logger_for(__name__)

DRAIN = "drain"
"""What a stalled drain is called where a gate's name would be (events, audit rows)."""
RAMP = "ramp"
"""What a ramp step waiting for an approval is called where a gate's name would be."""


@dataclass(frozen=True)
class GateWatch:
    """What one pass of :func:`watch_gates` did."""

    reminded: tuple[int, ...] = ()
    expired: tuple[int, ...] = ()
    to_drive: tuple[int, ...] = ()
    """Deployments the engine must advance: a restore an expiry started, or an expired deploy reopening admission."""
    lines: tuple[str, ...] = field(default=())
    errors: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        if not self.lines and not self.errors:
            return "no gate is due for a reminder or expiry"
        return "; ".join((*self.lines, *self.errors))


@dataclass(frozen=True)
class _Outcome:
    due: Due
    line: str = ""
    drive: int | None = None


def allowed_wait(endpoint: EndpointSettings, kind: str, state: State) -> dt.timedelta:
    """Minutes once users are closed out (or the candidate may be applied); hours while they are still served."""
    closed = state in USERS_CLOSED_OUT or is_past_apply(kind, state)
    minutes = endpoint.gate_wait_after_apply_minutes if closed else endpoint.gate_wait_before_apply_minutes
    return dt.timedelta(minutes=minutes)


def watch_gates(ctx: Context) -> GateWatch:
    """Remind about, or expire, every deployment that waits for a person past its time."""
    with ctx.uow() as uow:
        waiting = [d.id for d in uow.deployments.all_in_flight() if State(d.state) in WAITING or d.state == State.RAMPING]
    reminded: list[int] = []
    expired: list[int] = []
    to_drive: list[int] = []
    lines: list[str] = []
    errors: list[str] = []
    for deployment_id in waiting:
        try:
            outcome = _watch_one(ctx, deployment_id)
        except Exception as exc:  # one unreadable deployment must not stop the others from expiring
            log.exception("gate expiry of deployment #%s failed", deployment_id)
            errors.append(f"deployment #{deployment_id}: error ({type(exc).__name__}: {str(exc)[:200]})")
            continue
        if outcome.due == Due.REMIND:
            reminded.append(deployment_id)
        elif outcome.due == Due.EXPIRE:
            expired.append(deployment_id)
            if outcome.drive is not None:
                to_drive.append(outcome.drive)
        if outcome.line:
            lines.append(outcome.line)
    return GateWatch(reminded=tuple(reminded), expired=tuple(expired), to_drive=tuple(to_drive), lines=tuple(lines),
                     errors=tuple(errors))


def _watch_one(ctx: Context, deployment_id: int) -> _Outcome:
    now = ctx.clock.now()
    with ctx.uow() as uow:
        # The lock a gate decision takes: whichever commits first wins, the other sees the new state.
        dep = uow.deployments.get_for_update(deployment_id)
        if dep is None or (State(dep.state) not in WAITING and dep.state != State.RAMPING):
            return _Outcome(Due.NOTHING)
        state, kind = State(dep.state), path_kind(dep)
        endpoint = EndpointSettings.model_validate(dep.endpoint.settings)
        gate = state.gate
        row = uow.gates.latest(dep.id, gate) if gate is not None else None
        step: str | None = None
        if gate is not None:
            if row is None or row.decision is not None:
                return _Outcome(Due.NOTHING)  # checks still running, or decided: the engine moves it on
            since, name, what = row.checked_at, gate, f"the {gate} gate"
        elif state == State.RAMPING:  # waiting since the step's approval was asked; nothing asked: the engine drives
            held = ramp_step_waiting(uow, dep.id)
            if held is None:
                return _Outcome(Due.NOTHING)
            (step, since), name = held, RAMP
            what = f"the approval of ramp step {step}"
        else:  # drain_stalled: waiting since it stalled
            since, name, what = dep.updated_at, DRAIN, "the stalled drain"
        if row is not None:
            reminded = row.reminded_at is not None
        else:  # a drain or a ramp step: a reminder is remembered by its audit row
            reminded = any(at >= since for _, _, at, _ in uow.audit.actions(f"deployment:{dep.id}", "gate.reminded"))
        clock = GateClock(waiting_since=since, allowed=allowed_wait(endpoint, kind, state))
        due = clock.due(now, reminded=reminded)
        if due == Due.REMIND:
            _remind(uow, ctx, dep, endpoint, name, clock, now, step=step)
            if row is not None:
                row.reminded_at = now
            uow.commit()
            return _Outcome(due, f"deployment #{dep.id}: {name} reminded, expires in {words(clock.left(now))}")
        if due != Due.EXPIRE:
            return _Outcome(Due.NOTHING)
        reason = f"{what} expired: nobody decided within {words(clock.allowed)}"
        uow.audit.record(at=now, actor="kimi-ops", action="gate.expired", subject=f"deployment:{dep.id}",
                         details={"gate": name, "state": state.value, "waiting_since": since.isoformat(),
                                  "allowed_minutes": clock.allowed.total_seconds() / 60,
                                  "expires_at": clock.expires_at.isoformat(), **({"step": step} if step else {})})
        restore = end(uow, ctx, dep, State.EXPIRED, reason=reason, details={"gate": name})
        restore_id = restore.id if restore is not None else None
        reopening = dep.state == State.REOPENING
        uow.commit()
    closed = state in USERS_CLOSED_OUT or is_past_apply(kind, state)
    then = (f"restore #{restore_id} started" if restore_id is not None
            else f"all weight returning to {endpoint.pair.partner}" if reopening and endpoint.pair is not None
            else "reopening admission" if reopening
            else "users stay closed out; an admission-stuck incident pages" if closed else "endpoint free")
    # What the engine drives next: the restore, or the expired deploy reopening admission before it ends.
    drive = restore_id if restore_id is not None else deployment_id if reopening else None
    return _Outcome(Due.EXPIRE, f"deployment #{deployment_id}: {name} expired ({then})", drive=drive)


def _remind(uow: SqlUnitOfWork, ctx: Context, dep: Deployment, endpoint: EndpointSettings, gate: str, clock: GateClock,
            now: dt.datetime, *, step: str | None = None) -> None:
    """One reminder in the deployment's thread: the approvers mentioned, the requester told who decides and when it ends."""
    kind = path_kind(dep)
    approvers = _who_decides(ctx, endpoint, gate)
    requester = _mention(dep.requested_by)
    at = f"{clock.expires_at:%Y-%m-%d %H:%M} UTC"
    if gate == DRAIN:
        asked = (f"the drain of deployment #{dep.id} ({dep.release.name} on {endpoint.name}) stalled "
                 f"{words(now - clock.waiting_since)} ago and users are closed out. {approvers} can choose "
                 f"`/kimi drain wait {dep.id}` or `/kimi drain abort {dep.id}`")
        then = "it is aborted and users are reopened on the running release"
    elif gate == RAMP:
        asked = (f"the ramp of deployment #{dep.id} ({dep.release.name} on {endpoint.name}) has held before {step} for "
                 f"{words(now - clock.waiting_since)}. {approvers} can answer `/kimi ramp approve {dep.id} {step}`")
        then = _ending_after_apply(uow, dep, endpoint)
    else:
        asked = (f"the {gate} gate of deployment #{dep.id} ({dep.release.name} on {endpoint.name}) has waited "
                 f"{words(now - clock.waiting_since)} for a decision. {approvers} can approve or reject it")
        then = (_ending_after_apply(uow, dep, endpoint) if is_past_apply(kind, dep.state)
                else f"the deployment ends and {endpoint.name} is free for another deploy")
    mention = f"<!subteam^{endpoint.approver_group}> " if endpoint.approver_group else ""
    text = (f"{mention}{requester}: {asked}. It expires at {at} (in {words(clock.left(now))}); "
            f"then {then}.")
    uow.events.emit(GateReminder(deployment_id=dep.id, endpoint_name=endpoint.name, gate=gate, expires_at=clock.expires_at,
                                 text=text), at=now)
    uow.audit.record(at=now, actor="kimi-ops", action="gate.reminded", subject=f"deployment:{dep.id}",
                     details={"gate": gate, "waiting_since": clock.waiting_since.isoformat(),
                              "expires_at": clock.expires_at.isoformat(), "approver_group": endpoint.approver_group})


def _ending_after_apply(uow: SqlUnitOfWork, dep: Deployment, endpoint: EndpointSettings) -> str:
    """What an expiry after the apply does (as :func:`bot.services.transitions.end` does it), for the reminder."""
    if endpoint.pair is not None:
        return f"the deployment ends and all of {endpoint.pair.service}'s weight returns to {endpoint.pair.partner}"
    live = live_deployment(uow, dep.endpoint_id)
    return (f"the deployment ends and {live.release.name} is restored" if live is not None
            else "the deployment ends and users stay closed out until an admin acts")


def _who_decides(ctx: Context, endpoint: EndpointSettings, gate: str) -> str:
    """The approver group, else the members of the role that decides; never the requester where that is refused."""
    if endpoint.approver_group:
        who = f"<!subteam^{endpoint.approver_group}>"
    else:
        members = ctx.settings.roles.approver + ctx.settings.roles.admin
        who = ", ".join(dict.fromkeys(_mention(m) for m in members)) or "an approver"
    if gate != DRAIN and endpoint.requires_separate_approver:
        who += " (not the requester)"
    return who


def _mention(member: str) -> str:
    """A Slack mention for a user (``U…``/``W…``) or user group (``S…``) ID; anything else (``cli:login``) as is."""
    if member[:1] == "S" and member[1:].isalnum():
        return f"<!subteam^{member}>"
    if member[:1] in ("U", "W") and member[1:].isalnum():
        return f"<@{member}>"
    return member
