"""The metrics watch: every minute, each live endpoint's vLLM metrics, GPUs, pods and nodes, and the alerts they make.

For each endpoint with a live release and open admission (a deployment closing users out is watched by its
own gates), one run

1. reads vLLM's ``/metrics`` through the endpoint client (every name across vLLM versions, as the traffic
   gate reads them), the node's DCGM exporter where the endpoint names one, and the endpoint's pods and
   their nodes where the cluster adapter can say (all outside any transaction);
2. turns the counters into events and bad events per objective since the last reading (a restarted server
   counts from zero) and stores one compact sample with cumulative counts (:mod:`bot.adapters.store.samples`
   thins and bounds them);
3. computes each objective's burn rates over the SRE workbook's window pairs (:mod:`bot.domain.slo`) and the
   direct pages (:mod:`bot.domain.health`), and opens or closes incidents (:mod:`bot.services.incidents`), in
   the same transaction as the sample: once across replicas, because the job runs on the leader and an open
   incident is unique per endpoint and kind.

Incident kinds: ``burn-page:<objective>`` (fast burn, pages), ``burn-warn:<objective>`` (slow burn, warns),
``kv-pressure``, ``gpu``, ``node`` and ``crashloop`` (direct pages).
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.adapters.plots import plot_slo
from bot.adapters.store.models import Endpoint, MetricSample
from bot.adapters.store.repositories import Conflict
from bot.config import EndpointSettings
from bot.domain import slo
from bot.domain.events import SloPlot
from bot.domain.health import (
    GpuReading,
    GpuSnapshot,
    WorkloadHealth,
    crash_faults,
    gpu_faults,
    node_faults,
)
from bot.domain.readiness import MetricsSnapshot
from bot.domain.watchers import PROMETHEUS
from bot.logs import logger_for
from bot.services import ports
from bot.services.capacity import CAPACITY_KIND, watch_mix
from bot.services.context import Context, require
from bot.services.errors import NotFound
from bot.services.incidents import Incidents
from bot.services.pair_sides import effective_alerting
from bot.services.traffic_gate import objectives_for
from bot.services.transitions import live_deployment

log = logger_for(__name__)

MINUTES_KEPT = dt.timedelta(hours=7)  # minute rows for the 6-hour windows, one row an hour before that
DIRECT = ("kv-pressure", "gpu", "node", "crashloop")
BURN_KINDS = tuple(f"burn-{sev}:{name}" for sev in ("page", "warn") for name in slo.OBJECTIVES)
KINDS = (*BURN_KINDS, *DIRECT, CAPACITY_KIND)  # capacity-review: production's mix moved (bot.services.capacity)
LATENCY: dict[str, str] = {"ttft": "ttft_buckets", "queue": "queue_buckets", "e2e": "e2e_buckets"}


# ---------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Reading:
    """What one run read of one endpoint, before anything is stored."""

    metrics: MetricsSnapshot | None
    metrics_error: str | None = None
    gpus: GpuSnapshot | None = None
    gpus_error: str | None = None
    health: WorkloadHealth | None = None


@dataclass(frozen=True)
class WatchOutcome:
    endpoint: str
    watched: bool
    skipped: str | None = None
    opened: tuple[str, ...] = ()
    closed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        if not self.watched:
            return f"{self.endpoint}: not watched ({self.skipped})"
        extra = "".join(f"; {k} opened" for k in self.opened) + "".join(f"; {k} recovered" for k in self.closed)
        notes = "".join(f"; {n}" for n in self.notes)
        return f"{self.endpoint}: sampled{extra}{notes}"


@dataclass
class WatchReport:
    outcomes: list[WatchOutcome] = field(default_factory=list)
    thinned: int = 0

    @property
    def summary(self) -> str:
        if not self.outcomes:
            return "no endpoints declared"
        return "; ".join(o.line for o in self.outcomes)


# ---------------------------------------------------------------------------- objectives


def endpoint_objectives(ctx: Context, spec: EndpointSettings) -> tuple[slo.Objective, ...]:
    """The endpoint's objectives: its ``slo`` where set, else what its traffic gate measured against."""
    return slo.endpoint_objectives(spec.slo, objectives_for(ctx, spec), spec.ttft_objective_ms)


def retention(spec: EndpointSettings) -> dt.timedelta:
    return max(dt.timedelta(days=spec.slo.window_days), slo.LONGEST) + dt.timedelta(hours=1)


# ---------------------------------------------------------------------------- counting


def _raw(snapshot: MetricsSnapshot) -> dict[str, Any]:
    return {"requests": snapshot.http_requests if snapshot.http_requests is not None else snapshot.requests_finished,
            "errors": snapshot.http_errors, "rejects": snapshot.http_rejects,
            **{name: [[_le(le), count] for le, count in getattr(snapshot, attr)] for name, attr in LATENCY.items()}}


def _le(bound: float) -> float | str:
    return "+Inf" if math.isinf(bound) else bound  # JSON has no infinity (PostgreSQL refuses it)


def increments(before: Mapping[str, Any] | None, now: MetricsSnapshot,
               objectives: Sequence[slo.Objective]) -> tuple[dict[str, float], dict[str, float]]:
    """Events and bad events per objective between the last raw reading and ``now`` (none on a first reading)."""
    if before is None:
        return {}, {}
    raw = _raw(now)
    requests = slo.counter_delta(before.get("requests"), raw["requests"])
    events: dict[str, float] = {"errors": requests, "rejects": requests}
    bad: dict[str, float] = {"errors": slo.counter_delta(before.get("errors"), raw["errors"]),
                             "rejects": slo.counter_delta(before.get("rejects"), raw["rejects"])}
    bounds: dict[str, float] = {o.name: o.bound for o in objectives}
    for name in LATENCY:
        earlier = [(float(le), float(c)) for le, c in before.get(name) or []]  # float("+Inf") is infinity
        delta = slo.bucket_delta(earlier, [(float(le), float(c)) for le, c in raw[name]])
        total = delta[-1][1] if delta else 0.0
        events[name] = total
        bad[name] = max(0.0, total - slo.count_within(delta, bounds[name] / 1000))
    return events, bad


def counts_of(row: Any) -> slo.Counts:
    """The cumulative counts of a stored sample (a ``MetricSample`` or a plain row of its columns)."""
    if row is None:
        return slo.ZERO
    return slo.Counts(
        {"ttft": row.ttft_events, "queue": row.queue_events, "e2e": row.e2e_events, "errors": row.requests,
         "rejects": row.requests},
        {"ttft": row.ttft_bad, "queue": row.queue_bad, "e2e": row.e2e_bad, "errors": row.errors, "rejects": row.rejects},
    )


def sample_row(endpoint_id: int, at: dt.datetime, counts: slo.Counts, reading: Reading) -> MetricSample:
    m, g = reading.metrics, reading.gpus
    return MetricSample(
        endpoint_id=endpoint_id, at=at, step=60, requests=counts.events["errors"], errors=counts.bad["errors"],
        rejects=counts.bad["rejects"], ttft_events=counts.events["ttft"], ttft_bad=counts.bad["ttft"],
        queue_events=counts.events["queue"], queue_bad=counts.bad["queue"], e2e_events=counts.events["e2e"],
        e2e_bad=counts.bad["e2e"], waiting=m.waiting if m else None, kv_cache_usage=m.kv_cache_usage if m else None,
        gpu_utilisation=g.utilisation if g else None, gpu_memory=g.memory_share if g else None,
        gpu_power=g.power_watts if g else None,
    )


def samples_of(rows: Sequence[Any]) -> list[slo.Sample]:
    return [slo.Sample(r.at, counts_of(r)) for r in rows]


def _gpus_from(raw: Mapping[str, Any] | None) -> GpuSnapshot | None:
    if not raw or raw.get("nvlink") is None:
        return None
    return GpuSnapshot(tuple(GpuReading(gpu=k, nvlink_errors=float(v)) for k, v in raw["nvlink"].items()))


# ---------------------------------------------------------------------------- the run


def _read(ctx: Context, spec: EndpointSettings) -> Reading:
    client = require(ctx.ports.endpoint, "endpoint client", "for this process; metrics cannot be read")
    metrics: MetricsSnapshot | None = None
    metrics_error = gpus_error = None
    try:
        metrics = client.metrics(spec)
    except Exception as exc:  # one endpoint's unreadable /metrics must not stop the others; the readiness probe pages
        metrics_error = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    gpus = None
    if spec.dcgm_url and ctx.ports.gpus is not None:
        try:
            gpus = ctx.ports.gpus.read(spec.dcgm_url)
        except Exception as exc:  # a blind exporter is said in the run's summary, never read as healthy GPUs
            gpus_error = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    reader = _workloads(ctx)
    health = reader.health(spec) if reader is not None else None
    return Reading(metrics, metrics_error, gpus, gpus_error, health)


def _workloads(ctx: Context) -> ports.WorkloadReader | None:
    """The cluster adapter when it can read pods and nodes (a test's scripted cluster may not)."""
    cluster: object = ctx.ports.cluster
    return cluster if isinstance(cluster, ports.WorkloadReader) else None


def _spec(ctx: Context, row: Endpoint) -> EndpointSettings:
    return ctx.settings.endpoint(row.name) or EndpointSettings.model_validate(row.settings)


def watch_metrics(ctx: Context) -> WatchReport:
    """One round over every live endpoint with open admission; then thin the stored samples."""
    report = WatchReport()
    targets: list[EndpointSettings] = []
    with ctx.uow() as uow:
        rows = uow.endpoints.list()
        live = uow.deployments.live_by_endpoint([row.id for row in rows])
        for row in rows:
            if row.id not in live:
                report.outcomes.append(WatchOutcome(row.name, watched=False, skipped="no live release"))
            elif not row.admission_open:
                report.outcomes.append(WatchOutcome(row.name, watched=False, skipped="admission closed"))
            elif effective_alerting(ctx, spec := _spec(ctx, row)) == PROMETHEUS:  # its pages come from Alertmanager
                report.outcomes.append(WatchOutcome(row.name, watched=False, skipped="Prometheus watches it"))
            else:
                targets.append(spec)
    # KIMI_PROBE_CONCURRENCY endpoints are read at once (outside any transaction: scrapes and cluster reads take
    # time); each reading is recorded on this thread as it arrives, so the database sees one writer.
    with ThreadPoolExecutor(max_workers=max(1, min(ctx.settings.probe_concurrency, len(targets))),
                            thread_name_prefix="metrics") as pool:
        read = {pool.submit(_read, ctx, spec): spec for spec in targets}
        for future in as_completed(read):
            spec = read[future]
            try:
                report.outcomes.append(_record(ctx, spec, future.result()))
            except Conflict:
                log.info("a watch incident of %s was opened concurrently; this reading is dropped", spec.name)
                report.outcomes.append(WatchOutcome(spec.name, watched=False, skipped="another replica recorded this round"))
    now = ctx.clock.now()
    longest = max((retention(s) for s in [*targets, *ctx.settings.endpoints]), default=retention(EndpointSettings(name="x")))
    with ctx.uow() as uow:
        report.thinned = uow.samples.thin(now, minutes_kept=MINUTES_KEPT, retention=longest)
        uow.commit()
    report.outcomes.sort(key=lambda o: o.endpoint)
    return report


def _record(ctx: Context, spec: EndpointSettings, reading: Reading) -> WatchOutcome:
    now = ctx.clock.now()
    objectives = endpoint_objectives(ctx, spec)
    notes: list[str] = []
    with ctx.uow() as uow:
        row = uow.endpoints.get(spec.name)
        if row is None or not row.admission_open or live_deployment(uow, row.id) is None:
            return WatchOutcome(spec.name, watched=False, skipped="admission closed during the reading")
        cursor = uow.samples.cursor(row.id)
        before = dict(cursor.raw) if cursor is not None else None
        raw: dict[str, Any] = dict(before or {})
        window = dt.timedelta(days=spec.slo.window_days)
        # The rows the alert windows and the budget need, as plain columns; the newest is where counting goes on.
        history = samples_of(uow.samples.window_rows(row.id, now - max(slo.LONGEST, window)))
        if reading.metrics is not None:
            events, bad = increments(before.get("metrics") if before else None, reading.metrics, objectives)
            counts = (history[-1].counts if history else slo.ZERO).plus(events, bad)
            uow.samples.add(sample_row(row.id, now, counts, reading))
            history.append(slo.Sample(now, counts))
            raw["metrics"] = _raw(reading.metrics)
        else:
            notes.append(f"/metrics unreadable ({reading.metrics_error})")
        if reading.gpus_error:
            notes.append(f"DCGM unreadable ({reading.gpus_error})")
        if reading.gpus is not None:
            raw["nvlink"] = reading.gpus.nvlink_errors
        if reading.health is not None:
            raw["restarts"] = reading.health.restarts
        elif _workloads(ctx) is not None:
            notes.append("pods and nodes unreadable")
        uow.samples.set_cursor(row.id, now, raw)

        open_now = {i.kind: i for i in uow.incidents.open_of(row.id, KINDS)}
        incidents = Incidents(ctx, uow, row, spec, now, open_now)
        opened, closed = _alerts(history, spec, reading, before, objectives, incidents, now)
        if reading.metrics is not None:
            for done, more in zip((opened, closed), watch_mix(ctx, uow, row, spec, reading.metrics, incidents), strict=True):
                done.extend(more)
        uow.commit()
    return WatchOutcome(spec.name, watched=True, opened=tuple(opened), closed=tuple(closed), notes=tuple(notes))


def _alerts(history: Sequence[slo.Sample], spec: EndpointSettings, reading: Reading, before: Mapping[str, Any] | None,
            objectives: Sequence[slo.Objective], incidents: Incidents, now: dt.datetime) -> tuple[list[str], list[str]]:
    opened: list[str] = []
    closed: list[str] = []

    def decide(kind: str, severity: str, faults: Sequence[str] | None, healthy: str) -> None:
        if faults is None:
            return  # not read this round: neither opened nor closed on a guess
        if faults and incidents.open(kind, severity, "; ".join(faults)):
            opened.append(kind)
        elif not faults and incidents.close(kind, healthy):
            closed.append(kind)

    if reading.metrics is not None:
        window = dt.timedelta(days=spec.slo.window_days)
        for burn in slo.burns(history, now, objectives, objective_window=window,
                              min_requests=spec.slo.min_requests):
            name = burn.objective.name
            for severity, pair in (("page", burn.page), ("warn", burn.warn)):
                reason = [slo.alert_reason(burn, pair, window)] if pair is not None else []
                decide(f"burn-{severity}:{name}", severity, reason, f"{burn.objective.words} is back within its budget")
        decide("kv-pressure", "page", _kv_pressure(spec, reading.metrics, before), "no requests rejected")
    if reading.gpus is not None:
        decide("gpu", "page", gpu_faults(reading.gpus, _gpus_from(before), spec.gpus), "every GPU healthy")
    if reading.health is not None:
        decide("node", "page", node_faults(reading.health), "its nodes are Ready without pressure")
        restarts = before.get("restarts") if before else None
        decide("crashloop", "page", crash_faults(reading.health, restarts), "no container is crash-looping")
    return opened, closed


def _kv_pressure(spec: EndpointSettings, metrics: MetricsSnapshot, before: Mapping[str, Any] | None) -> list[str]:
    """KV-cache usage at the pressure mark while requests were rejected since the last reading."""
    last = (before or {}).get("metrics") or {}
    rejected = slo.counter_delta(last.get("rejects"), metrics.http_rejects) if last else 0.0
    usage = metrics.kv_cache_usage
    if usage is None or usage < spec.slo.kv_cache_pressure or rejected <= 0:
        return []
    return [f"KV-cache usage {usage:.0%} (mark {spec.slo.kv_cache_pressure:.0%}) and {rejected:.0f} requests rejected "
            f"since the last reading"]


# ---------------------------------------------------------------------------- readers (``/kimi slo``)


@dataclass(frozen=True)
class SloView:
    endpoint: str
    window_days: float
    burns: list[slo.Burn]
    open_incidents: list[tuple[str, str, dt.datetime]]  # kind, reason, opened
    last_sample: dt.datetime | None
    plot: dict[str, Any] | None = None  # the PNG of the last hours (path, bytes, sha256)


def _recent(rows: Sequence[MetricSample], objectives: Sequence[slo.Objective], since: dt.datetime) -> list[dict[str, Any]]:
    """Per reading in the plot's hours: each objective's bad share since the reading before, and the gauges."""
    found: list[dict[str, Any]] = []
    budgets = {o.name: o.budget for o in objectives}
    for earlier, later in itertools.pairwise(rows):
        if later.at < since:
            continue
        delta = counts_of(later) - counts_of(earlier)
        found.append({"at": later.at, "bad": {n: delta.ratio(n) for n in budgets}, "budget": budgets,
                      "kv": later.kv_cache_usage, "waiting": later.waiting})
    return found


def slo_view(ctx: Context, name: str, *, hours: float = 6, plot_dir: Path | None = None) -> SloView:
    """An endpoint's objectives now: burn rates and budget left; with ``plot_dir``, a PNG of the last ``hours``."""
    now = ctx.clock.now()
    with ctx.uow() as uow:
        row = uow.endpoints.get(name)
        if row is None:
            raise NotFound(f"no endpoint named {name}; `kimi-ops status` lists them all")
        spec = _spec(ctx, row)
        window = dt.timedelta(days=spec.slo.window_days)
        rows = list(uow.samples.since(row.id, now - max(slo.LONGEST, window)))
        objectives = endpoint_objectives(ctx, spec)
        burns = slo.burns(samples_of(rows), now, objectives, objective_window=window, min_requests=spec.slo.min_requests)
        recent = _recent(rows, objectives, now - dt.timedelta(hours=hours))
        incidents = [(i.kind, i.reason, i.opened_at) for i in uow.incidents.open_by_endpoint(KINDS).get(row.id, [])]
        last = rows[-1].at if rows else None
    plot = None
    if plot_dir is not None and recent:
        path = plot_dir / f"slo-{name}-{now:%Y%m%dT%H%M%S}.png"
        plot = plot_slo(recent, path, f"{name}: error-budget burn and load, last {hours:g} h")
    return SloView(name, spec.slo.window_days, burns, incidents, last, plot)


def share_plot(ctx: Context, view: SloView, channel: str | None) -> bool:
    """Ask the notifier to upload ``view``'s PNG to ``channel`` (the endpoint's when None); False without a plot."""
    if view.plot is None:
        return False
    with ctx.uow() as uow:
        uow.events.emit(SloPlot(endpoint_name=view.endpoint, channel=channel, text="", path=str(view.plot["path"]),
                                sha256=str(view.plot["sha256"]), title=f"{view.endpoint}: objectives, last hours"),
                        at=ctx.clock.now())
        uow.commit()
    return True
