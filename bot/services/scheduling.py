"""The scheduled jobs kimi-ops runs, how often, and what each run did.

``JOBS`` names every job once: its period (from settings), the importable
module-level function APScheduler stores as a textual reference
(``jobs.reservation_watch:run``), and the service call it makes.
``run_job`` runs one job now and records its outcome as an audit row
(``job.run`` on subject ``job:NAME``), which is where ``kimi-ops jobs list`` reads
each job's last outcome; a failing job records the failure and never raises, so
the scheduler keeps its schedule. A job that moves deployments on (the gate
expiry starts restores) is given the process's engine: ``run_job(..., engine=)``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.config import Settings
from bot.logs import logger_for
from bot.services.alert_intake import RECONCILER
from bot.services.alert_rules import PUBLISHER
from bot.services.context import Context, require
from bot.services.errors import NotFound, UserError
from bot.services.failover import failover_round
from bot.services.gate_expiry import watch_gates
from bot.services.metrics_watch import watch_metrics
from bot.services.readiness import probe_endpoints
from bot.services.reservations import watch_reservations

if TYPE_CHECKING:  # the engine loads only in a process that runs deployments
    from bot.services.engine import Engine

log = logger_for(__name__)

SUMMARY_LIMIT = 2000


@dataclass(frozen=True)
class JobSpec:
    name: str
    description: str
    func: str
    """``module:function`` of the entrypoint APScheduler calls (a textual, picklable reference)."""
    period_minutes: Callable[[Settings], int]
    service: Callable[[Context, Engine | None], str]
    """What one run does, given the Context and the process's engine (``None`` where none was given)."""


@dataclass(frozen=True)
class JobRun:
    name: str
    started_at: dt.datetime
    ok: bool
    summary: str
    trigger: str
    actor: str


@dataclass(frozen=True)
class JobInfo:
    name: str
    description: str
    every_minutes: int
    next_run: dt.datetime | None
    last_run: JobRun | None


def _watch(ctx: Context, engine: Engine | None) -> str:
    return watch_reservations(ctx).summary


def _probe(ctx: Context, engine: Engine | None) -> str:
    """A readiness round, then the fallback for endpoints Kimi K3 stopped answering on (and back when it answers)."""
    outcomes = probe_endpoints(ctx)
    moved = [o.line for o in failover_round(ctx)]
    return "; ".join([o.line for o in outcomes] + moved) if outcomes else "no endpoints declared"


def _metrics(ctx: Context, engine: Engine | None) -> str:
    """The built-in watch's round, then the rules of the endpoints Prometheus watches, applied where they changed, and
    their pages closed whose alert Alertmanager no longer holds."""
    return "; ".join((watch_metrics(ctx).summary, *PUBLISHER.publish(ctx), *RECONCILER.reconcile(ctx),
                      *(o.line for o in failover_round(ctx))))


def _expire(ctx: Context, engine: Engine | None) -> str:
    """Remind about and expire waiting gates, then drive what expiry started (restores, reopening) to its end.

    The drive runs after every expiry committed and inside this run, so the job
    never overlaps itself (``max_instances=1``): a long restore delays the next
    run, whose backlog then runs once (``coalesce``).
    """
    drive = require(engine, "deployment engine", "to drive the restores a gate expiry starts")
    report = watch_gates(ctx)
    outcomes: list[str] = []
    for deployment_id in report.to_drive:
        try:
            view = drive.advance(deployment_id)
        except Exception as exc:  # one restore failing to run must not hide the others; resume picks it up
            log.exception("driving expired deployment #%s failed", deployment_id)
            outcomes.append(f"deployment #{deployment_id} not driven ({type(exc).__name__})")
            continue
        outcomes.append(f"deployment #{deployment_id} {view.state.words}")
    summary = "; ".join((report.summary, *outcomes))
    if report.errors:
        raise UserError(summary)
    return summary


JOBS: dict[str, JobSpec] = {
    spec.name: spec
    for spec in (
        JobSpec(
            name="reservation-watch",
            description="Capacity Blocks and training plans: store, match, alert before the end",
            func="jobs.reservation_watch:run",
            period_minutes=lambda s: s.reservation_watch_minutes,
            service=_watch,
        ),
        JobSpec(
            name="readiness-probe",
            description="a real, timed completion against every live endpoint with open admission",
            func="jobs.readiness_probe:run",
            period_minutes=lambda s: s.readiness_probe_minutes,
            service=_probe,
        ),
        JobSpec(
            name="gate-expiry",
            description="gates nobody decides: remind the approvers at half-time, end (and restore) at expiry",
            func="jobs.gate_expiry:run",
            period_minutes=lambda s: s.gate_expiry_minutes,
            service=_expire,
        ),
        JobSpec(
            name="metrics-watch",
            description="live endpoints' vLLM metrics, GPUs, pods and nodes: burn-rate alerts and direct pages",
            func="jobs.metrics_watch:run",
            period_minutes=lambda s: s.metrics_watch_minutes,
            service=_metrics,
        ),
    )
}


def job_spec(name: str) -> JobSpec:
    spec = JOBS.get(name)
    if spec is None:
        raise NotFound(f"no job named {name}; jobs are: {', '.join(JOBS)}")
    return spec


def run_job(ctx: Context, name: str, *, engine: Engine | None = None, trigger: str = "schedule",
            actor: str = "kimi-ops:scheduler") -> JobRun:
    """Run one job now and record its outcome; failures are recorded, not raised."""
    spec = job_spec(name)
    started = ctx.clock.now()
    try:
        summary, ok = spec.service(ctx, engine), True
    except UserError as exc:
        summary, ok = str(exc), False
    except Exception as exc:  # a broken run must not kill the scheduler thread; the outcome says what happened
        log.exception("job %s failed", name)
        first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        summary, ok = f"error: {first}", False
    run = JobRun(name=name, started_at=started, ok=ok, summary=summary[:SUMMARY_LIMIT], trigger=trigger, actor=actor)
    with ctx.uow() as uow:
        uow.audit.record(
            at=ctx.clock.now(), actor=actor, action="job.run", subject=f"job:{name}",
            details={"ok": ok, "summary": run.summary, "trigger": trigger, "started_at": started.isoformat()},
        )
        uow.commit()
    return run


def last_run(ctx: Context, name: str) -> JobRun | None:
    runs = runs_of(ctx, name, limit=1)
    return runs[0] if runs else None


def runs_of(ctx: Context, name: str, limit: int = 1000) -> list[JobRun]:
    """Recorded runs of one job, newest first."""
    job_spec(name)
    with ctx.uow() as uow:
        entries = [(e.at, e.actor, dict(e.details)) for e in uow.audit.list(subject=f"job:{name}", limit=limit)]
    return [
        JobRun(name=name, started_at=dt.datetime.fromisoformat(d["started_at"]) if d.get("started_at") else at,
               ok=bool(d.get("ok")), summary=str(d.get("summary", "")), trigger=str(d.get("trigger", "")), actor=actor)
        for at, actor, d in entries
    ]


def job_overview(ctx: Context, next_runs: Mapping[str, dt.datetime | None]) -> list[JobInfo]:
    """Every job with its period, next run (from the scheduler's store) and last recorded outcome."""
    return [
        JobInfo(name=spec.name, description=spec.description, every_minutes=spec.period_minutes(ctx.settings),
                next_run=next_runs.get(spec.name), last_run=last_run(ctx, spec.name))
        for spec in JOBS.values()
    ]
