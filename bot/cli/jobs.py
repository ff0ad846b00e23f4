"""``kimi-ops jobs list / run / start``, ``kimi-ops reservations`` and ``kimi-ops status``.

``jobs list`` shows each scheduled job's period, next run (from the scheduler's
job store) and last recorded outcome; ``jobs run NAME`` runs one job now in
this process and prints what it did; ``jobs start`` runs the scheduler in the
foreground (with leader election) until interrupted. ``reservations`` and
``status`` show what the reservation watch and the readiness probes last saw.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import typer

from bot.cli import output
from bot.cli.common import context, default_actor
from bot.cli.conventions import OUTPUT_OPTION, Format, plain, typer_app
from bot.cli.guard import run_guarded
from bot.cli.slo_rules import slo_app
from bot.cli.watch import WATCH_OPTION, WATCH_TIMEOUT_OPTION, watch_endpoint, watching

if TYPE_CHECKING:
    from bot.services.metrics_watch import SloView
    from bot.services.readiness import EndpointStatus

app = typer_app(help="Scheduled jobs: the reservation watch, readiness probes and gate expiry.")


def _at(value: dt.datetime | None) -> str:
    return "-" if value is None else value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


@app.command("list")
def list_(fmt: Format = OUTPUT_OPTION) -> None:
    """Each job: schedule, next run, last run and its outcome."""
    from bot.scheduler import next_runs
    from bot.services.scheduling import job_overview

    def body() -> None:
        ctx = context()
        jobs = job_overview(ctx, next_runs(ctx))
        output.emit(fmt, jobs, lambda: output.table(
            "Scheduled jobs",
            ["name", "every", "next run", "last run", "last outcome"],
            [
                (
                    j.name,
                    f"{j.every_minutes} min",
                    _at(j.next_run) if j.next_run else "not scheduled (no scheduler has run)",
                    _at(j.last_run.started_at) if j.last_run else "never",
                    ("ok: " if j.last_run.ok else "FAILED: ") + j.last_run.summary if j.last_run else "-",
                )
                for j in jobs
            ],
        ))

    run_guarded(body)


@app.command("run")
def run(name: str = typer.Argument(..., metavar="JOB", help="Job name, as `kimi-ops jobs list` shows it.")) -> None:
    """Run one job now, in this process, and print what it did."""
    from bot.bootstrap import build_root
    from bot.services.scheduling import run_job

    def body() -> None:
        ctx = context()
        # The process's engine: a gate expiry run here drives the restore it starts, as the scheduled run would.
        result = run_job(ctx, name, engine=build_root(ctx).engine, trigger="manual", actor=default_actor())
        if result.ok:
            output.info(f"{name}: {result.summary}")
            return
        output.error(f"{name} failed: {result.summary}")
        raise typer.Exit(1)

    run_guarded(body)


@app.command("start")
def start() -> None:
    """Run the scheduler in the foreground (only the elected replica runs jobs) until Ctrl-C."""
    import threading

    from bot.cli.common import root as process_root
    from bot.scheduler import JobRunner

    def body() -> None:
        runner = JobRunner(process_root())
        runner.start()
        output.info(f"scheduler running as {runner.lock.identity} ({'leader' if runner.leading else 'standby'}); Ctrl-C stops it")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            output.info("stopping")
        finally:
            runner.stop()

    run_guarded(body)


def reservations(all_: bool = typer.Option(False, "--all", help="Also show reservations that are gone."),
                 fmt: Format = OUTPUT_OPTION) -> None:
    """What the reservation watch last saw: each reservation, its endpoint and the time left."""
    from bot.domain.expiry import format_remaining
    from bot.services.reservations import reservation_overview

    def body() -> None:
        views = reservation_overview(context(), include_gone=all_)
        output.emit(fmt, views, lambda: output.table(
            "Reservations",
            ["id", "kind", "instance type", "zone", "state", "endpoint", "ends", "left", "alerts sent (h)", "last seen"],
            [
                (
                    v.id.rsplit("/", 1)[-1], v.kind, f"{v.instance_count} × {v.instance_type}",
                    v.availability_zone or "-", v.state + (" (gone)" if v.gone_at else ""), v.endpoint or "-",
                    _at(v.end), format_remaining(v.left), ", ".join(f"{h:g}" for h in v.alerts_sent_hours) or "-",
                    _at(v.last_seen_at),
                )
                for v in views
            ],
            empty="none seen yet; `kimi-ops jobs run reservation-watch` reads AWS now",
        ))

    run_guarded(body)


def status(endpoint: str = typer.Argument(None, metavar="ENDPOINT", help="Endpoint (default: all)."),
           fmt: Format = OUTPUT_OPTION, watch: bool = WATCH_OPTION, timeout: float = WATCH_TIMEOUT_OPTION) -> None:
    """Each endpoint: live release, what the cluster runs and users get, drift, last probe, incidents, reservation left.

    With --watch, follow the deployment in flight on ENDPOINT instead, as it is recorded."""
    from bot.services.readiness import endpoint_status

    def body() -> None:
        if watching(watch, fmt, timeout):
            watch_endpoint(context(), endpoint, timeout)
            return
        statuses = endpoint_status(context(), endpoint)
        output.emit(fmt, statuses, lambda: _show_status(statuses))

    run_guarded(body)


def _show_status(statuses: list[EndpointStatus]) -> None:
    from bot.views.status import cluster_rows

    if not statuses:
        output.info("no endpoints declared; add them under endpoints: in the KIMI_CONFIG file")
    for s in statuses:
        last = s.last_probe
        output.table(
            f"Endpoint {s.name}",
            ["field", "value"],
            [
                ("live release", f"{s.live_release} since {_at(s.live_since)}" if s.live_release else "none"),
                ("admission", f"{s.cluster.recorded.admission if s.cluster else 'open' if s.admission_open else 'closed'}"
                              " (kimi-ops's record)"),
                *cluster_rows(s.cluster, configured=s.request_limits.model_dump(mode="json"),
                              accepted_source=s.limits_accepted),
                ("last probe", f"{_at(last.at)}: {last.summary}" if last else "never probed"),
                ("first-token objective", f"{s.ttft_objective_ms} ms"),
                ("pages after go-live", s.watched_by),
                ("last cold start", f"{s.cold_start.words()} ({_at(s.cold_start_at)})" if s.cold_start else "-"),
                ("open incidents",
                 "; ".join(f"{i.kind} since {_at(i.opened_at)}: {i.reason}" for i in s.incidents) or "none"),
                ("reservation",
                 f"{s.reservation.id.rsplit('/', 1)[-1]} ends {_at(s.reservation.end)} ({s.reservation_left} left)"
                 if s.reservation else "none seen"),
            ],
        )
        output.table(
            f"Probes of {s.name} (newest first)",
            ["at", "result", "HTTP", "first token (ms)", "total (ms)"],
            [
                (_at(p.at), "ok" if p.ok else f"failed ({p.failure_kind}): {p.error}", p.http_status or "-",
                 f"{p.ttft_ms:.0f}" if p.ttft_ms is not None else "-", f"{p.total_ms:.0f}" if p.total_ms is not None else "-")
                for p in s.recent_probes
            ],
            empty="none yet",
        )


def _slo_data(view: SloView) -> dict[str, Any]:
    """One endpoint's objectives for ``-o json|yaml``: burn rates keyed by window (``5m``, ``1h``, ``3d``)."""
    def span(window: dt.timedelta) -> str:
        minutes = int(window.total_seconds() // 60)
        return f"{minutes // 1440}d" if minutes % 1440 == 0 else f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"

    return {
        "endpoint": view.endpoint, "window_days": view.window_days, "last_reading": plain(view.last_sample),
        "objectives": [{"name": b.objective.name, "bound": b.objective.bound, "budget": b.objective.budget,
                        "burn": {span(w): r for w, r in b.rates.items()}, "budget_left": b.budget_left,
                        "alert": "page" if b.page else "warn" if b.warn else None} for b in view.burns],
        "open_incidents": [{"kind": kind, "reason": reason, "opened_at": plain(opened)}
                           for kind, reason, opened in view.open_incidents],
    }


def slo(endpoint: str = typer.Argument(None, help="Endpoint (default: all)."),
        png: str = typer.Option(None, "--png", help="Also draw the last hours of ENDPOINT into this PNG file."),
        fmt: Format = OUTPUT_OPTION) -> None:
    """Each endpoint's objectives: burn rate over the alert windows, error budget left, open watch alerts."""
    from pathlib import Path

    from bot.services.metrics_watch import slo_view
    from bot.views.slo import burn_rows

    def show(view: SloView) -> None:
        header, rows = burn_rows(view.burns)
        output.table(f"Objectives of {view.endpoint} over {view.window_days:g} days (last reading "
                     f"{_at(view.last_sample)})", header, [tuple(r) for r in rows], empty="no reading yet")
        for kind, reason, opened in view.open_incidents:
            output.info(f"{kind} since {_at(opened)}: {reason}")

    def body() -> None:
        ctx = context()
        names = [endpoint] if endpoint else [e.name for e in ctx.settings.endpoints]
        if not names and fmt is Format.TABLE:
            output.info("no endpoints declared; add them under endpoints: in the KIMI_CONFIG file")
        target = Path(png) if png and endpoint else None
        views = [slo_view(ctx, name, plot_dir=target.parent if target else None) for name in names]
        drawn = False
        for view in views:
            if target is not None and view.plot is not None:
                Path(view.plot["path"]).replace(target)
                drawn = True

        def tables() -> None:
            for view in views:
                show(view)
            if drawn:
                output.info(f"plot of the last hours written to {target}")

        output.emit(fmt, [_slo_data(v) for v in views], tables)

    run_guarded(body)


def register(root: typer.Typer) -> None:
    """Add ``jobs``, ``reservations``, ``status`` and ``slo`` to the root CLI."""
    root.add_typer(app, name="jobs")
    root.command("reservations")(reservations)
    root.command("status")(status)
    root.add_typer(slo_app(slo), name="slo")
