"""Running an approved drill: inject the fault, look until the alert rules fire, lift it, judge, record."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from bot.adapters.clock import Sleeps
from bot.adapters.store.repositories import Conflict
from bot.config import EndpointSettings
from bot.domain import drills as rules
from bot.domain.chat_text import literal
from bot.domain.drills import DrillView
from bot.domain.health import WorkloadHealth, crash_faults, node_faults
from bot.domain.rollout import RenderedManifest
from bot.logs import logger_for
from bot.services import ports
from bot.services.context import Context, require
from bot.services.drills.records import ACTOR, ALERT_KINDS, say, spec_of, view_of
from bot.services.errors import NotConfigured, NotFound
from bot.services.failover import failover_round, on_fallback_seconds
from bot.services.incidents import Incidents
from bot.services.readiness import FAILING
from bot.services.reservations import rehearse_expiry
from bot.services.transitions import live_deployment

log = logger_for(__name__)

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
    on_fallback_seconds: float | None = None  # how long users were on the fallback, once the failover gave them back


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


def _failover(ctx: Context, run: _Run) -> list[str]:
    """What the failover round did to this endpoint on this look (bot/services/failover.py), as drill notes; once
    users are back, how long they were on the fallback (the failover incident's closing) is the run's."""
    moved = [o.action for o in failover_round(ctx) if o.endpoint == run.spec.name
             and o.action in ("failed over", "failed back")]
    if "failed back" in moved:
        with ctx.uow() as uow:
            run.on_fallback_seconds = on_fallback_seconds(uow, run.spec.name)
    return [f"users {a.replace('failed over', 'moved to the fallback').replace('failed back', 'back on Kimi K3')}"
            for a in moved]


def _record(ctx: Context, run: _Run, action: str, text: str, **changes: Any) -> None:
    now = ctx.clock.now()
    with ctx.uow() as uow:
        drill = uow.drills.get_for_update(run.drill_id)
        assert drill is not None
        for name, value in changes.items():
            setattr(drill, name, value)
        say(uow, run.spec, drill, now, ACTOR, action, text, **{k: str(v) for k, v in changes.items() if k != "details"})
        uow.commit()


def run_drill(ctx: Context, drill_id: int) -> DrillView:
    """Run an approved drill to its end: inject, look, lift, judge, record. Returns the ended drill."""
    with ctx.uow() as uow:
        drill = uow.drills.get_for_update(drill_id)
        if drill is None:
            raise NotFound(f"no drill #{drill_id}")
        if drill.state != rules.RUNNING or drill.started_at is not None:
            return view_of(drill)  # waiting, ended, or another thread runs it
        now = ctx.clock.now()
        drill.started_at = now
        spec = spec_of(ctx, drill.endpoint)
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
            notes.extend(_failover(ctx, run))  # users admitted to an endpoint with a fallback move to it, and back
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
    try:
        notes.extend(_failover(ctx, run))  # recovered: the fallback gives users back once the readiness suite passes
    except Exception as exc:
        log.warning("drill #%s: the failover round failed: %s", run.drill_id, exc, exc_info=True)
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
                         "faults_seen": sorted({f for o in run.observations for f in o.faults})[:20],
                         "on_fallback_seconds": run.on_fallback_seconds}
        view = view_of(drill)
        icon = ":white_check_mark:" if passed else ":x:"
        fallback = ("" if run.on_fallback_seconds is None else
                    f"; users were on the fallback for {rules.seconds(dt.timedelta(seconds=run.on_fallback_seconds))}")
        say(uow, run.spec, drill, now, ACTOR, "drill.ended",
             f"{icon} drill #{drill.id} ({drill.kind} on `{run.spec.name}`) {view.state}: {literal(reason)}"
             + (f"; alerts: {', '.join(view.alerts)}" if view.alerts else "; no alert fired") + fallback + ".",
             passed=passed, detection_seconds=view.detection_seconds, recovery_seconds=view.recovery_seconds,
             on_fallback_seconds=run.on_fallback_seconds, alerts=view.alerts, notes=notes)
        uow.commit()
        return view
