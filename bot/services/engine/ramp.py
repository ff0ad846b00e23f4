"""The ramp step: users meet the candidate in shares, each held for a soak while its objectives hold.

Each share's split (the candidate and where the rest of the users are) is a thread message; a ramp
configured with approval steps holds before them until an approver answers (:mod:`bot.services.ramp_approvals`).
At the end the ramp's plot is asked for, with the last split message; the notifier draws it from the stored
split messages afterwards, so a step that broke its objectives gives users back without waiting for a picture.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from bot.domain.admission import Admission, parse_admission
from bot.domain.events import RampPlot, RampSplit
from bot.domain.events import RolloutProgress as RolloutProgressEvent
from bot.domain.ramp import Window, needs_approval, next_step, ramp_steps, window_between, window_summary
from bot.domain.rollout import RolloutProgress
from bot.domain.states import State
from bot.services.admission import AdmissionFailed, apply_admission, record_admission
from bot.services.alert_rules import apply_after_go_live
from bot.services.engine.closed_door import own_words, reach_now, stored_own
from bot.services.engine.revised import limits_first, limits_left
from bot.services.engine.run import Runner, Snapshot, StateMoved, StepFailed, WaitingForPerson
from bot.services.objectives import RampObjectives
from bot.services.ramp_approvals import RAMP_ASKED, ramp_steps_approved
from bot.services.transitions import transition


def ramp(runner: Runner, snap: Snapshot) -> None:
    """Users meet the candidate in steps; a step whose soak breaks an objective fails it.

    The failure restores the previous release on a single node, and on a pair side returns all the service's
    weight to the other side in one route change (``end`` → ``reopening``). A restart resumes at the step the
    endpoint row records: that step is applied again (the same weights) and soaked from its start. Limits accepted
    while it ramps stop it where it is (:mod:`bot.services.engine.revised`).
    """
    endpoint = snap.endpoint
    with runner.ctx.uow() as uow:
        row = uow.endpoints.get(endpoint.name)
        current = row.admission if row is not None else "closed"
    steps = ramp_steps(endpoint.ramp.steps) if endpoint.route is not None else ("open",)
    # Accepted limits restart the model: their revision is applied behind a closed route and passes readiness again
    # before anyone enters, and then the ramp starts again from its first step.
    snap, again = limits_first(runner, snap, admitted=current in steps)
    if again:
        current = "closed"
    if current not in steps:
        reach = reach_now(runner, snap, stored_own(runner, snap.id))  # as stored now: readiness just above counts
        if reach is not None and reach.users > 0:
            raise StepFailed(f"{reach.users:.0f} requests besides kimi-ops's own {own_words(reach.own)} reached "
                             "the candidate while users were closed out")
    step = current if current in steps else next_step(steps, None)
    last: dict[str, Window] = {}
    while step is not None:
        if limits_left(runner, snap):
            raise StateMoved(f"deployment #{snap.id}: limits were accepted while ramping; the ramp closes to apply them")
        if step != current and needs_approval(step, endpoint.ramp.approval_steps) and not _ask_approval(runner, snap, step):
            raise WaitingForPerson(f"deployment #{snap.id} waits for an approval of its ramp step {step}")
        admission = parse_admission(step)
        reason = f"{snap.kind} #{snap.id} ramp: {step}"
        try:
            words = apply_admission(runner.ctx, endpoint, admission, reason)
        except AdmissionFailed as exc:
            raise StepFailed(str(exc)) from exc
        with runner.ctx.uow() as uow:
            runner.locked(uow, snap)
            record_admission(uow, runner.ctx, endpoint.name, admission, reason, actor="kimi-ops", deployment_id=snap.id,
                             words=words)
            uow.commit()
        if step == "open":
            break
        _show_split(runner, snap, step, last, next_step=next_step(steps, step))
        last = _soak(runner, snap, step, admission)
        step = next_step(steps, step)
    with runner.ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        uow.events.emit(_split_event(snap, "open", last, outcome="live"), at=runner.ctx.clock.now())
        if endpoint.pair is not None:
            # The other side keeps its release warm with no users: `/kimi rollback SERVICE` moves them back.
            record_admission(uow, runner.ctx, endpoint.pair.partner, Admission.closed(),
                             f"{snap.kind} #{snap.id} moved every user to {endpoint.name}", actor="kimi-ops",
                             deployment_id=snap.id, words=f"no user reaches it; it keeps its release warm for "
                                                          f"`/kimi rollback {endpoint.pair.service}`")
        transition(uow, runner.ctx, dep, State.LIVE, reason="ramp complete: everyone reaches Kimi K3"
                   if endpoint.pair is None else f"ramp complete: all of {endpoint.pair.service}'s weight is on "
                   f"{endpoint.name}", details={"admission": "open"})
        uow.events.emit(_ramp_plot(snap), at=runner.ctx.clock.now())  # after "live", as the thread reads
        uow.commit()
    apply_after_go_live(runner.ctx, endpoint.name, snap.id)  # the alerts' release label follows at once

def _ask_approval(runner: Runner, snap: Snapshot, step: str) -> bool:
    """True when ``step`` was approved; otherwise ask for it in the thread (once) and say False."""
    subject = f"deployment:{snap.id}"
    with runner.ctx.uow() as uow:
        if step in ramp_steps_approved(uow, snap.id):
            return True
        runner.locked(uow, snap)
        asked = {d.get("step") for _, _, _, d in uow.audit.actions(subject, RAMP_ASKED)}
        if step not in asked:
            now = runner.ctx.clock.now()
            uow.audit.record(at=now, actor="kimi-ops", action=RAMP_ASKED, subject=subject, details={"step": step})
            group = snap.endpoint.approver_group
            mention = f"<!subteam^{group}> " if group else ""
            uow.events.emit(RolloutProgressEvent(
                deployment_id=snap.id, endpoint_name=snap.endpoint.name, state=State.RAMPING.value,
                message=f"{mention}the ramp holds before {step}: an approver answers `/kimi ramp approve {snap.id} "
                        f"{step}` to go on, or `/kimi cancel {snap.id}` to give users back"), at=now)
            uow.commit()
    return False

def _split_event(snap: Snapshot, step: str, windows: dict[str, Window], *, next_step: str | None = None,
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

def _ramp_plot(snap: Snapshot) -> RampPlot:
    """The ask for the ramp's PNG, drawn by the notifier from the stored split messages (a resumed ramp's included)."""
    title = f"Ramp of {snap.subject.release.name} on {snap.endpoint.name} · deployment #{snap.id}"
    return RampPlot(deployment_id=snap.id, endpoint_name=snap.endpoint.name, title=title)

def _show_split(runner: Runner, snap: Snapshot, step: str, windows: dict[str, Window], *, next_step: str | None) -> None:
    now = runner.ctx.clock.now()
    event = _split_event(snap, step, windows, next_step=next_step,
                              next_at=now + dt.timedelta(seconds=snap.endpoint.ramp.soak_seconds))
    with runner.ctx.uow() as uow:
        uow.events.emit(event, at=now)
        uow.commit()

def _soak(runner: Runner, snap: Snapshot, step: str, admission: Admission) -> dict[str, Window]:
    """Hold one step for its soak while /metrics is sampled on each side users are on; any breach fails it."""
    ramp = snap.endpoint.ramp
    sides = [snap.endpoint] + ([snap.partner] if snap.partner is not None else [])
    before = {side.name: runner.metrics(snap, side) for side in sides}
    unread = [name for name, m in before.items() if m is None]
    if unread:
        raise StepFailed(f"ramp step {step}: the /metrics of {', '.join(unread)} cannot be read, so the objectives "
                         "cannot be checked")
    first = {name: m for name, m in before.items() if m is not None}
    after = dict(first)
    peaks = {name: (m.waiting, m.kv_cache_usage) for name, m in first.items()}
    started = time.monotonic()
    with runner.stoppable(snap) as stop:
        while (left := ramp.soak_seconds - (time.monotonic() - started)) > 0:
            if stop.wait(min(ramp.sample_seconds, left)):
                raise StateMoved("ramp soak stopped")
            if limits_left(runner, snap):  # accepted meanwhile: the ramp stops at once to apply them
                raise StateMoved(f"deployment #{snap.id}: limits were accepted while ramping; the ramp closes to apply them")
            for side in sides:
                sample = runner.metrics(snap, side)
                if sample is None:
                    continue
                after[side.name] = sample
                waiting, kv = peaks[side.name]
                peaks[side.name] = (max(waiting or 0.0, sample.waiting or 0.0), max(kv or 0.0, sample.kv_cache_usage or 0.0))
    checker = runner.ctx.ports.objectives or RampObjectives()
    broken: list[str] = []
    seen: list[str] = []
    windows: dict[str, Window] = {}
    for side in sides:
        final = runner.metrics(snap, side) or after[side.name]
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
        with runner.ctx.uow() as uow:
            uow.events.emit(_split_event(snap, step, windows, outcome=f"{why}; {back}"), at=runner.ctx.clock.now())
            uow.events.emit(_ramp_plot(snap), at=runner.ctx.clock.now())
            uow.commit()
        raise StepFailed(why)
    runner.progress(snap, RolloutProgress(f"ramp step {step} held: {'; '.join(seen)}", "ramping"))
    return windows
