"""Availability drills: asked for by a deployer, approved by someone else, run against a live endpoint, recorded.

A drill (:mod:`bot.domain.drills` has the kinds and the verdict) is a row of ``drills``:

1. :func:`request_drill` (the ``drill`` action, deployers) records it ``waiting``. It is refused on an endpoint
   with no live release, while a deployment or another drill holds the endpoint, and while users are admitted
   (the endpoint's admission is open, or a share of it) unless the requester accepts the impact
   (``accept_user_impact``).
2. :func:`decide_drill` (the ``approve_drill`` action, approvers; never the requester, whatever the
   environment: a drill breaks a serving endpoint on purpose) approves it (``running``) or rejects it with
   a reason. The admission rule is checked again at approval.
3. :func:`run_drill` injects the fault through the cluster adapter (``DrillActions`` and ``Cluster.apply``),
   then looks at the endpoint every ``drill_poll_seconds`` — a readiness completion through the endpoint
   client, the pods and nodes through the cluster's ``WorkloadReader`` — and applies the alert rules the
   watch and the probe apply (``crashloop`` and ``node`` page on the first look that sees them, ``readiness``
   after ``readiness_failures_to_alert`` failed completions in a row), through the metrics watch's
   :class:`~bot.services.incidents.Incidents`, so the pages are real. A fault kimi-ops lifts itself is
   lifted once an alert fired (the on-call person's move), or at half the time limit when none did; a
   fault is always lifted before the drill ends, whatever happens. Detection, recovery, the alerts and the
   verdict are stored, audited and posted to the endpoint's channel.

Every state change is one transaction with an audit row (``drill.requested``, ``drill.approved``,
``drill.rejected``, ``drill.started``, ``drill.lifted``, ``drill.ended``) and a :class:`DrillNotice`.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from bot.adapters.clock import Sleeps
from bot.adapters.store.models import Drill, Endpoint
from bot.adapters.store.repositories import Conflict
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain import drills as rules
from bot.domain.admission import Admission, parse_admission
from bot.domain.drills import DrillView
from bot.domain.events import DrillNotice
from bot.domain.health import WorkloadHealth, crash_faults, node_faults
from bot.domain.names import did_you_mean, match
from bot.domain.rollout import RenderedManifest
from bot.logs import logger_for
from bot.services import ports
from bot.services.access import Identity, authorize
from bot.services.context import Context, require
from bot.services.errors import NotConfigured, NotFound, Refused
from bot.services.incidents import Incidents
from bot.services.readiness import FAILING
from bot.services.reservations import rehearse_expiry
from bot.services.transitions import live_deployment

log = logger_for(__name__)
ACTOR = "kimi-ops:drill"
ALERT_KINDS = (FAILING, "crashloop", "node")


def _span(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds()


def _view(row: Drill) -> DrillView:
    return DrillView(
        id=row.id, endpoint=row.endpoint.name, kind=row.kind, state=row.state, requested_by=row.requested_by,
        requested_at=row.requested_at, accept_user_impact=row.accept_user_impact, decided_by=row.decided_by,
        started_at=row.started_at, detection_seconds=_span(row.started_at, row.detected_at),
        recovery_seconds=_span(row.started_at, row.recovered_at), alerts=list(row.alerts or []), passed=row.passed,
        reason=row.reason,
    )


def _endpoint(uow: SqlUnitOfWork, name: str, *, lock: bool = False) -> Endpoint:
    """The endpoint named ``name`` in any case, or :class:`NotFound` with the closest names."""
    names = [e.name for e in uow.endpoints.list()]
    declared = match(name, names)
    row = None if declared is None else uow.endpoints.get_for_update(declared) if lock else uow.endpoints.get(declared)
    if row is None:
        raise NotFound(f"no endpoint named {name}{did_you_mean(name, names) or ''}; `/kimi status` lists them all")
    return row


def _spec(ctx: Context, row: Endpoint) -> EndpointSettings:
    return ctx.settings.endpoint(row.name) or EndpointSettings.model_validate(row.settings)


def check_kind(kind: str) -> str:
    """The kind, lower-cased, or :class:`Refused` naming the closest and every kind."""
    wanted = kind.strip().lower()
    if wanted not in rules.KINDS:
        hint = did_you_mean(kind, rules.KINDS) or ""
        raise Refused(f"there is no drill kind {kind!r}{hint}; kinds: {', '.join(rules.KINDS)}")
    return wanted


def _users_admitted(row: Endpoint) -> str | None:
    """What users get now, when they reach the model at all (None: closed out)."""
    try:
        admitted = parse_admission(row.admission or ("open" if row.admission_open else "closed"))
    except ValueError:
        return row.admission  # a word kimi-ops does not know: assume users may be there
    return None if admitted == Admission.closed() else str(admitted)


def _refuse_user_impact(row: Endpoint, accepted: bool) -> None:
    admitted = _users_admitted(row)
    if admitted is not None and not accepted:
        raise Refused(f"users are admitted to {row.name} ({admitted}): a drill breaks their requests. Close admission "
                      f"first (`/kimi admission close {row.name} --reason …`), or accept the impact with "
                      "`accept-user-impact` (CLI: `--accept-user-impact`)")


def _say(uow: SqlUnitOfWork, spec: EndpointSettings, drill: Drill, at: dt.datetime, actor: str, action: str,
         text: str, **details: Any) -> None:
    """One audit row and one channel line for a drill's state change (the caller's transaction)."""
    uow.audit.record(at=at, actor=actor, action=action, subject=f"endpoint:{spec.name}",
                     details={"drill_id": drill.id, "kind": drill.kind, **details})
    uow.events.emit(DrillNotice(endpoint_name=spec.name, channel=spec.channel, text=text, drill_id=drill.id,
                                state=drill.state), at=at)


def _abandoned(ctx: Context, drill: Drill, now: dt.datetime) -> bool:
    """A running drill that outlived its time limit by ten minutes: whatever ran it is gone."""
    since = drill.started_at or drill.decided_at
    limit = dt.timedelta(minutes=ctx.settings.drill_timeout_minutes + 10)
    return drill.state == rules.RUNNING and since is not None and now - since > limit


def request_drill(ctx: Context, actor: Identity, endpoint: str, kind: str, *, accept_user_impact: bool = False) -> DrillView:
    """Record a drill waiting for its approver; refused where it cannot or should not run."""
    kind = check_kind(kind)
    authorize(ctx, actor, "drill", f"endpoint:{endpoint}")
    now = ctx.clock.now()
    with ctx.uow() as uow:
        row = _endpoint(uow, endpoint, lock=True)
        live = live_deployment(uow, row.id)
        if live is None:
            raise Refused(f"{row.name} has no live release: a drill tests an endpoint that serves")
        if kind in (rules.MODEL_LOAD_FAILURE, rules.ARTIFACT_OUTAGE, rules.BAD_RELEASE) and not live.applied_manifest:
            raise Refused(f"the live deployment #{live.id} of {row.name} has no stored manifest to put back after a "
                          f"{kind} drill; deploy or roll back through kimi-ops first")
        busy = uow.deployments.in_flight(row.id)
        if busy is not None:
            raise Refused(f"deployment #{busy.id} holds {row.name}; drill once it has ended")
        active = uow.drills.active_for(row.id)
        if active is not None and _abandoned(ctx, active, now):
            # The process running it stopped (a restart, a lost worker): nothing will finish it. Said, not hidden.
            active.state, active.active, active.passed, active.ended_at = rules.FAILED, None, False, now
            active.reason = ("abandoned: the process running it stopped before it ended; check the endpoint "
                             "(a cordoned node or a drill manifest may still be in place)")
            _say(uow, _spec(ctx, row), active, now, ACTOR, "drill.ended", f":x: drill #{active.id} ({active.kind} on "
                 f"`{row.name}`) failed: {active.reason}.", passed=False, abandoned=True)
            uow.flush()
        elif active is not None:
            raise Refused(f"drill #{active.id} ({active.kind}) is already {active.state} on {row.name}")
        _refuse_user_impact(row, accept_user_impact)
        drill = uow.drills.add(Drill(endpoint_id=row.id, kind=kind, state=rules.WAITING, active=True,
                                     requested_by=actor.user_id, requested_at=now, accept_user_impact=accept_user_impact,
                                     alerts=[], details={}))
        spec = _spec(ctx, row)
        impact = " with users' impact accepted" if accept_user_impact else ""
        _say(uow, spec, drill, now, actor.user_id, "drill.requested",
             f":test_tube: {actor.user_id} asks for a {kind} drill on `{spec.name}`{impact} (drill #{drill.id}): "
             f"{rules.KINDS[kind]}. An approver other than them answers `/kimi drill approve {drill.id}` or "
             f"`/kimi drill reject {drill.id} REASON`.", accept_user_impact=accept_user_impact)
        view = _view(drill)
        uow.commit()
        return view


def decide_drill(ctx: Context, actor: Identity, drill_id: int, approve: bool, reason: str = "") -> DrillView:
    """Approve (the drill is then ``running``: call :func:`run_drill`) or reject a waiting drill."""
    reason = " ".join(reason.split())
    if not approve and not reason:
        raise Refused("a rejection needs a reason, e.g. `/kimi drill reject 3 not during the launch week`")
    authorize(ctx, actor, "approve_drill", f"drill:{drill_id}")
    now = ctx.clock.now()
    with ctx.uow() as uow:
        drill = uow.drills.get_for_update(drill_id)
        if drill is None:
            raise NotFound(f"no drill #{drill_id}; `/kimi drills ENDPOINT` lists them")
        if drill.state != rules.WAITING:
            raise Refused(f"drill #{drill.id} is not waiting for a decision (it is {drill.state})")
        if actor.user_id == drill.requested_by:
            uow.audit.record(at=now, actor=actor.user_id, action="access.refused", subject=f"drill:{drill.id}",
                             details={"wanted": "approve_drill", "why": "self_approval"})
            uow.commit()
            raise Refused(f"you asked for drill #{drill.id}; someone else must approve or reject it")
        spec = _spec(ctx, drill.endpoint)
        drill.decided_by, drill.decided_at = actor.user_id, now
        if approve:
            if uow.deployments.in_flight(drill.endpoint_id) is not None:
                raise Refused(f"a deployment holds {spec.name} now; approve drill #{drill.id} once it has ended")
            _refuse_user_impact(drill.endpoint, drill.accept_user_impact)
            drill.state = rules.RUNNING
            _say(uow, spec, drill, now, actor.user_id, "drill.approved",
                 f":test_tube: {actor.user_id} approved drill #{drill.id} ({drill.kind} on `{spec.name}`); it starts now.")
        else:
            drill.state, drill.active, drill.ended_at, drill.reason = rules.REJECTED, None, now, reason[:500]
            _say(uow, spec, drill, now, actor.user_id, "drill.rejected",
                 f":test_tube: {actor.user_id} rejected drill #{drill.id} ({drill.kind} on `{spec.name}`): {reason[:500]}",
                 reason=reason[:500])
        view = _view(drill)
        uow.commit()
        return view


# ---------------------------------------------------------------------------- running


@dataclass
class _Run:
    """What one drill run knows while it runs (outside any transaction)."""

    drill_id: int
    kind: str
    spec: EndpointSettings
    started: dt.datetime
    live_manifest: RenderedManifest | None
    observations: list[rules.Observation] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    failed_answers: int = 0
    lifted: bool = False
    undo: dict[str, Any] = field(default_factory=dict)


def _wait(ctx: Context, seconds: float) -> None:
    clock: object = ctx.clock
    if isinstance(clock, Sleeps):
        clock.sleep(seconds)  # a test's clock moves instead of the process sleeping
    else:
        time.sleep(seconds)


def _actions(ctx: Context) -> ports.DrillActions:
    cluster: object = require(ctx.ports.cluster, "cluster access", "for this process; drills act on the cluster")
    if not isinstance(cluster, ports.DrillActions):
        raise NotConfigured("this process's cluster adapter cannot run drills")
    return cluster


def _apply(ctx: Context, spec: EndpointSettings, manifest: RenderedManifest) -> None:
    cluster = require(ctx.ports.cluster, "cluster access", "for this process; drills act on the cluster")
    result = cluster.apply(spec, manifest)  # as the engine applies a release: another manager's field is a conflict
    if result.conflicts:
        raise RuntimeError("the cluster refused the manifest: " + "; ".join(result.conflicts[:3]))


def _inject(ctx: Context, run: _Run) -> str:
    actions = _actions(ctx)
    spec = run.spec
    if run.kind == rules.POD_DELETION:
        return "deleted " + (", ".join(actions.delete_pods(spec)) or "no pod (none was running)")
    if run.kind == rules.NODE_LOSS:
        reader = _reader(ctx)
        health = reader.health(spec) if reader is not None else None
        nodes = sorted({p.node for p in (health.pods if health else ()) if p.node})
        if not nodes:
            raise RuntimeError(f"no node runs a pod of {spec.name}")
        actions.cordon(spec, nodes, True)
        run.undo["cordoned"] = nodes
        deleted = actions.delete_pods(spec)
        return f"cordoned {', '.join(nodes)} and evicted {', '.join(deleted) or 'no pod'}"
    assert run.live_manifest is not None
    broken = actions.drill_variant(spec, run.live_manifest, run.kind)
    _apply(ctx, spec, broken)
    return f"applied the live manifest's {run.kind} variant (sha256 {broken.sha256[:12]})"


def _lift(ctx: Context, run: _Run) -> str | None:
    """Undo what kimi-ops injected (nothing for a deleted pod: its controller brings one back)."""
    if run.lifted or run.kind not in rules.LIFTED:
        return None
    run.lifted = True
    if run.kind == rules.NODE_LOSS:
        nodes = list(run.undo.get("cordoned") or [])
        if nodes:
            _actions(ctx).cordon(run.spec, nodes, False)
        return f"uncordoned {', '.join(nodes) or 'nothing'}"
    assert run.live_manifest is not None
    _apply(ctx, run.spec, run.live_manifest)
    return f"re-applied the stored live manifest (sha256 {run.live_manifest.sha256[:12]})"


def _reader(ctx: Context) -> ports.WorkloadReader | None:
    cluster: object = ctx.ports.cluster
    return cluster if isinstance(cluster, ports.WorkloadReader) else None


def _observe(ctx: Context, run: _Run) -> tuple[rules.Observation, WorkloadHealth | None, bool]:
    client = require(ctx.ports.endpoint, "endpoint client", "for this process; a drill asks the endpoint")
    try:
        answer = client.readiness(run.spec)
        answered, error = answer.ok, None if answer.ok else answer.summary
    except Exception as exc:  # an adapter that raises is an endpoint that did not answer
        answered, error = False, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    reader = _reader(ctx)
    health = reader.health(run.spec) if reader is not None else None
    now = ctx.clock.now()
    return rules.Observation(now, rules.serving_faults(answered, error, health)), health, answered


def _alert(ctx: Context, run: _Run, health: WorkloadHealth | None, answered: bool, at: dt.datetime) -> None:
    """The watch's and the probe's rules on this look: open what they would open, close what recovered."""
    run.failed_answers = 0 if answered else run.failed_answers + 1
    found: dict[str, list[str]] = {
        FAILING: ["not answering"] if run.failed_answers >= ctx.settings.readiness_failures_to_alert else [],
        "crashloop": crash_faults(health, None) if health is not None else [],
        "node": node_faults(health) if health is not None else [],
    }
    try:
        with ctx.uow() as uow:
            row = uow.endpoints.get(run.spec.name)
            if row is None:
                return
            incidents = Incidents(ctx, uow, row, run.spec, at,
                                  {i.kind: i for i in uow.incidents.open_of(row.id, ALERT_KINDS)})
            opened: list[str] = []
            for kind, faults in found.items():
                if faults and incidents.open(kind, "page", f"{'; '.join(faults)} (drill #{run.drill_id}, {run.kind})"):
                    opened.append(kind)
                elif not faults and kind in run.alerts:
                    incidents.close(kind, f"drill #{run.drill_id} recovered")
            uow.commit()
            run.alerts.extend(opened)
    except Conflict:
        # A job (users admitted: the watch runs too) opened the same incident meanwhile: it fired, and is theirs.
        log.info("drill #%s: an incident of %s was opened concurrently", run.drill_id, run.spec.name)


def _record(ctx: Context, run: _Run, action: str, text: str, **changes: Any) -> None:
    now = ctx.clock.now()
    with ctx.uow() as uow:
        drill = uow.drills.get_for_update(run.drill_id)
        assert drill is not None
        for name, value in changes.items():
            setattr(drill, name, value)
        _say(uow, run.spec, drill, now, ACTOR, action, text, **{k: str(v) for k, v in changes.items() if k != "details"})
        uow.commit()


def run_drill(ctx: Context, drill_id: int) -> DrillView:
    """Run an approved drill to its end: inject, look, lift, judge, record. Returns the ended drill."""
    with ctx.uow() as uow:
        drill = uow.drills.get_for_update(drill_id)
        if drill is None:
            raise NotFound(f"no drill #{drill_id}")
        if drill.state != rules.RUNNING or drill.started_at is not None:
            return _view(drill)  # waiting, ended, or another thread runs it
        now = ctx.clock.now()
        drill.started_at = now
        spec = _spec(ctx, drill.endpoint)
        live = live_deployment(uow, drill.endpoint_id)
        manifest = RenderedManifest.from_text(live.applied_manifest) if live is not None and live.applied_manifest else None
        run = _Run(drill.id, drill.kind, spec, now, manifest)
        uow.audit.record(at=now, actor=ACTOR, action="drill.started", subject=f"endpoint:{spec.name}",
                         details={"drill_id": drill.id, "kind": drill.kind})
        uow.commit()
    if run.kind == rules.RESERVATION_EXPIRY:
        return _finish_rehearsal(ctx, run)
    deadline = run.started + dt.timedelta(minutes=ctx.settings.drill_timeout_minutes)
    notes: list[str] = []
    try:
        notes.append(_inject(ctx, run))
        while True:
            observation, health, answered = _observe(ctx, run)
            run.observations.append(observation)
            _alert(ctx, run, health, answered, observation.at)
            detected = any(not o.healthy for o in run.observations)
            if detected and observation.healthy:
                break
            half_time = observation.at - run.started >= (deadline - run.started) / 2
            if detected and not run.lifted and run.kind in rules.LIFTED and (run.alerts or half_time):
                lifted = _lift(ctx, run)
                if lifted:
                    notes.append(lifted)
                    _record(ctx, run, "drill.lifted", f":test_tube: drill #{run.drill_id} on `{run.spec.name}`: {lifted}.",
                            lifted_at=ctx.clock.now())
            if observation.at >= deadline:
                break
            _wait(ctx, ctx.settings.drill_poll_seconds)
    except Exception as exc:  # a drill that cannot act or look ends failed, with its fault lifted
        log.warning("drill #%s on %s stopped: %s", run.drill_id, run.spec.name, exc, exc_info=True)
        notes.append(f"stopped: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}")
    finally:
        try:
            lifted = _lift(ctx, run)
            if lifted:
                notes.append(lifted)
        except Exception as exc:  # said in the record: a person must undo it by hand
            log.error("drill #%s could not lift its fault: %s", run.drill_id, exc, exc_info=True)
            notes.append(f"COULD NOT LIFT THE FAULT, undo it by hand: {exc}")
    verdict = rules.judge(run.started, run.observations, run.alerts, deadline)
    stopped = next((n for n in notes if n.startswith(("stopped:", "COULD NOT"))), None)
    passed = verdict.passed and stopped is None
    reason = verdict.reason if stopped is None else f"{verdict.reason}; {stopped}"
    return _finish(ctx, run, passed, reason, verdict.detected_at, verdict.recovered_at, notes)


def _finish_rehearsal(ctx: Context, run: _Run) -> DrillView:
    rehearsal = rehearse_expiry(ctx, run.spec.name)
    if rehearsal.reservation is None:
        return _finish(ctx, run, False, "no reservation the watch knows ends for this endpoint", None, None, [])
    assert rehearsal.ends is not None and rehearsal.alert_at is not None
    if rehearsal.alert is not None:
        run.alerts.append(rehearsal.alert)
    lead = rehearsal.ends - rehearsal.alert_at
    notes = [f"reservation {rehearsal.reservation} ends {rehearsal.ends:%Y-%m-%d %H:%M} UTC; the watch, run at "
             f"{rehearsal.alert_at:%Y-%m-%d %H:%M} UTC, {'sends ' + rehearsal.alert if rehearsal.alert else 'says nothing'}"]
    detected = run.started if rehearsal.alert else None
    if rehearsal.alert is None:
        return _finish(ctx, run, False, "the reservation watch would say nothing before the end", None, None, notes)
    if rehearsal.takeover is None:
        return _finish(ctx, run, False, f"the watch pages {rules.seconds(lead)} before the end, but no tested endpoint "
                                        "takes over: the endpoint stops serving when its reservation ends",
                       detected, None, notes)
    return _finish(ctx, run, True, f"the watch alerts {rules.seconds(lead)} before the end; {rehearsal.takeover}",
                   detected, detected, notes)


def _finish(ctx: Context, run: _Run, passed: bool, reason: str, detected: dt.datetime | None,
            recovered: dt.datetime | None, notes: list[str]) -> DrillView:
    now = ctx.clock.now()
    with ctx.uow() as uow:
        drill = uow.drills.get_for_update(run.drill_id)
        assert drill is not None
        drill.state = rules.PASSED if passed else rules.FAILED
        drill.passed, drill.reason, drill.active, drill.ended_at = passed, reason[:1000], None, now
        drill.detected_at, drill.recovered_at, drill.alerts = detected, recovered, sorted(set(run.alerts))
        drill.details = {"notes": notes, "looks": len(run.observations),
                         "faults_seen": sorted({f for o in run.observations for f in o.faults})[:20]}
        view = _view(drill)
        icon = ":white_check_mark:" if passed else ":x:"
        _say(uow, run.spec, drill, now, ACTOR, "drill.ended",
             f"{icon} drill #{drill.id} ({drill.kind} on `{run.spec.name}`) {view.state}: {reason}"
             + (f"; alerts: {', '.join(view.alerts)}" if view.alerts else "; no alert fired") + ".",
             passed=passed, detection_seconds=view.detection_seconds, recovery_seconds=view.recovery_seconds,
             alerts=view.alerts, notes=notes)
        uow.commit()
        return view


# ---------------------------------------------------------------------------- readers


def list_drills(ctx: Context, actor: Identity, endpoint: str, limit: int = 10) -> list[DrillView]:
    """The endpoint's last drills, newest first."""
    authorize(ctx, actor, "view", f"endpoint:{endpoint}")
    with ctx.uow() as uow:
        row = _endpoint(uow, endpoint)
        return [_view(d) for d in uow.drills.for_endpoint(row.id, limit)]


def drill_check_reason(ctx: Context, endpoint: str) -> str | None:
    """Why the infrastructure gate warns about the endpoint's drills (None: one passed within the period)."""
    with ctx.uow() as uow:
        row = uow.endpoints.get(endpoint)
        last = uow.drills.last_passed(row.id) if row is not None else None
        ended = last.ended_at if last is not None else None
    return rules.stale_drills(ended, ctx.clock.now(), dt.timedelta(days=ctx.settings.drill_period_days))
