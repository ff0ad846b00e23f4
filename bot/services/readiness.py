"""Readiness probes: a real, timed completion against every live endpoint, and the incidents they open.

``probe_endpoints`` sends the readiness completion (through the ``endpoint``
adapter) to each endpoint that has a live release and whose admission is open;
an endpoint closed for a rollback is never probed, and a result that arrives
after admission closed is dropped. Each probe is stored in
``readiness_checks`` (timings and outcome, never text).

Incidents (table ``incidents``, at most one open per endpoint and kind, a
database rule) keep alerts from storming:

* ``readiness``: ``KIMI_READINESS_FAILURES_TO_ALERT`` consecutive failed
  completions open it, with the reason; the next completion that answers closes it;
* ``ttft``: the same number of consecutive answers slower (time to first token)
  than the endpoint's ``ttft_objective_ms`` open it; an answer within the
  objective closes it.

Opening sends one alert, closing one recovery message (one message even when
both close together); each is an audit row and an outbox event written in the
same transaction as the probe.

``endpoint_status`` is the read model ``/kimi status`` renders: live release,
admission, last probe and its timings, recent probes, open incidents and the
endpoint's reservation countdown, and — read from the cluster by
:mod:`bot.services.status` — what runs, what users get, the limits applied and
any drift from the record. Reservations and incidents are read once per page.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace

from bot.adapters.store.models import Deployment, Endpoint, Incident, ReadinessCheck
from bot.adapters.store.repositories import Conflict
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings, RequestLimits
from bot.domain.chat_text import literal
from bot.domain.coldstart import ColdStart
from bot.domain.drift import ClusterTruth, Recorded
from bot.domain.events import ReadinessAlert, ReadinessRecovered
from bot.domain.expiry import USABLE_STATES, format_remaining
from bot.domain.read_models import DeploymentView
from bot.domain.readiness import ReadinessResult
from bot.domain.watchers import PROMETHEUS, ServiceWatch, watcher
from bot.logs import logger_for
from bot.services import ports
from bot.services.admission import FAILOVER
from bot.services.context import Context, require
from bot.services.deployments import endpoint_row
from bot.services.fallback_hold import fallback_holds, held
from bot.services.metrics_watch import KINDS as WATCH_KINDS
from bot.services.pair_sides import effective_alerting, fast_path, side_watch
from bot.services.reservations import (
    MISSING_INCIDENT,
    WATCH_INCIDENT,
    ReservationView,
    reservation_overview,
)
from bot.services.status import RecordSnapshot, cluster_truths, record_of
from bot.services.stored_settings import stored_settings
from bot.services.transitions import deployment_view, live_deployment

log = logger_for(__name__)

ACTOR = "kimi-ops:readiness-probe"
FAILING = "readiness"
SLOW = "ttft"
# Shown by ``/kimi status``: this module's incidents, the reservation watch's and the metrics watch's.
INCIDENT_KINDS = (FAILING, SLOW, WATCH_INCIDENT, MISSING_INCIDENT, *WATCH_KINDS, FAILOVER)


# ---------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ProbeView:
    at: dt.datetime
    ok: bool
    http_status: int | None
    ttft_ms: float | None
    total_ms: float | None
    failure_kind: str | None
    error: str | None

    @property
    def summary(self) -> str:
        if self.ok:
            return f"answered: first token {self.ttft_ms or 0:.0f} ms, complete {self.total_ms or 0:.0f} ms"
        return f"failed ({self.failure_kind}): {self.error}"


@dataclass(frozen=True)
class IncidentView:
    kind: str
    reason: str
    opened_at: dt.datetime


@dataclass(frozen=True)
class ProbeOutcome:
    """What the probe job did for one endpoint."""

    endpoint: str
    probed: bool
    result: ProbeView | None = None
    skipped: str | None = None
    opened: tuple[str, ...] = ()
    closed: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        if not self.probed:
            return f"{self.endpoint}: not probed ({self.skipped})"
        assert self.result is not None
        extra = "".join(f"; {k} incident opened" for k in self.opened) + "".join(f"; {k} incident closed" for k in self.closed)
        return f"{self.endpoint}: {self.result.summary}{extra}"


@dataclass(frozen=True)
class EndpointStatus:
    """Everything ``/kimi status`` shows about one endpoint."""

    name: str
    kind: str
    environment: str
    url: str
    admission_open: bool
    live_release: str | None
    live_since: dt.datetime | None
    ttft_objective_ms: int
    last_probe: ProbeView | None
    request_limits: RequestLimits = field(default_factory=RequestLimits)
    limits_accepted: bool = False  # the limits came from an approver accepting a traffic gate's proposal
    recent_probes: list[ProbeView] = field(default_factory=list)
    incidents: list[IncidentView] = field(default_factory=list)
    reservation: ReservationView | None = None
    cluster: ClusterTruth | None = None  # None when the cluster was not asked (``observe=False``)
    cold_start: ColdStart | None = None  # the last rollout's, with when it went ready
    cold_start_at: dt.datetime | None = None
    alerting: str = "builtin"  # who pages after go-live (the slo.alerting in effect: a pair's sides share one)
    in_flight: DeploymentView | None = None  # the deployment in flight on the endpoint, with its waiting gate
    service_watch: ServiceWatch | None = None  # a side of a pair: its service's watchers

    @property
    def watched_by(self) -> str:
        own = watcher(self.alerting) + (" (kimi-ops applies the rules; `kimi-ops slo rules` shows them)"
                                        if self.alerting == PROMETHEUS else "")
        return own + (self.service_watch.side_words(self.name) if self.service_watch is not None else "")

    @property
    def reservation_left(self) -> str:
        if self.reservation is None:
            return "no reservation seen"
        return format_remaining(self.reservation.left)


# ---------------------------------------------------------------------------- pure rule


def streaks(history: Sequence[ProbeView], needed: int, ttft_objective_ms: float) -> tuple[bool, bool]:
    """``(failing, slow)`` over the newest ``needed`` probes (newest first)."""
    window = list(history[:needed])
    if len(window) < needed:
        return False, False
    failing = all(not p.ok for p in window)
    slow = all(p.ok and p.ttft_ms is not None and p.ttft_ms > ttft_objective_ms for p in window)
    return failing, slow


# ---------------------------------------------------------------------------- probing


def _probe_view(row: ReadinessCheck) -> ProbeView:
    return ProbeView(at=row.at, ok=row.ok, http_status=row.http_status, ttft_ms=row.ttft_ms, total_ms=row.total_ms,
                     failure_kind=row.failure_kind, error=row.error)


def _spec(ctx: Context, row: Endpoint) -> EndpointSettings:
    return ctx.settings.endpoint(row.name) or EndpointSettings.model_validate(row.settings)


def _targets(ctx: Context) -> tuple[list[EndpointSettings], list[ProbeOutcome]]:
    targets: list[EndpointSettings] = []
    skipped: list[ProbeOutcome] = []
    with ctx.uow() as uow:
        rows = uow.endpoints.list()
        live = uow.deployments.live_by_endpoint([row.id for row in rows])
        for row in rows:
            if row.id not in live:
                skipped.append(ProbeOutcome(row.name, probed=False, skipped="no live release"))
            elif not row.admission_open:
                skipped.append(ProbeOutcome(row.name, probed=False, skipped="admission closed"))
            else:
                targets.append(_spec(ctx, row))
    return targets, skipped


def _ask(client: ports.EndpointClient, spec: EndpointSettings) -> ReadinessResult:
    try:
        return client.readiness(spec)
    except Exception as exc:  # the adapter should report failures as results; never let one endpoint stop the job
        log.warning("readiness completion against %s raised: %s", spec.name, exc, exc_info=True)
        text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        return ReadinessResult(ok=False, failure_kind="protocol", error=text)


def probe_endpoints(ctx: Context) -> list[ProbeOutcome]:
    """One round of readiness probes over every live endpoint with open admission.

    Up to ``KIMI_PROBE_CONCURRENCY`` completions run at once on the endpoint client's one shared HTTP client, so a
    fleet is probed well inside the probe's period; each result is recorded (a transaction of its own) on this
    thread as it arrives, so the database sees one writer and a slow endpoint delays nobody's record.
    """
    client = require(ctx.ports.endpoint, "endpoint client", "for this process; readiness cannot be probed")
    targets, outcomes = _targets(ctx)
    if not targets:
        return sorted(outcomes, key=lambda o: o.endpoint)
    workers = min(ctx.settings.probe_concurrency, len(targets))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="probe") as pool:
        # Outside any transaction: a completion can take seconds.
        asked = {pool.submit(_ask, client, spec): spec for spec in targets}
        for future in as_completed(asked):
            spec = asked[future]
            try:
                outcomes.append(_record(ctx, spec, future.result()))
            except Conflict:
                # Another replica opened the same incident at the same moment: its alert stands, this round is dropped.
                log.info("incident for %s was opened concurrently; probe result dropped", spec.name)
                outcomes.append(ProbeOutcome(spec.name, probed=False, skipped="another replica recorded this round"))
    return sorted(outcomes, key=lambda o: o.endpoint)


def _record(ctx: Context, spec: EndpointSettings, result: ReadinessResult) -> ProbeOutcome:
    now = ctx.clock.now()
    with ctx.uow() as uow:
        row = uow.endpoints.get(spec.name)
        if row is None or not row.admission_open or live_deployment(uow, row.id) is None:
            # A rollback closed admission while the completion ran: its answer says nothing about service.
            return ProbeOutcome(spec.name, probed=False, skipped="admission closed during the probe")
        check = uow.readiness.add(ReadinessCheck(
            endpoint_id=row.id, at=now, ok=result.ok, http_status=result.http_status, ttft_ms=result.ttft_ms,
            total_ms=result.total_ms, failure_kind=result.failure_kind, error=result.error,
        ))
        needed = ctx.settings.readiness_failures_to_alert
        history = [_probe_view(r) for r in uow.readiness.recent(row.id, needed)]
        failing, slow = streaks(history, needed, spec.ttft_objective_ms)
        incidents = _Incidents(ctx, uow, row, spec, now)
        opened: list[str] = []
        closed: list[str] = []
        if failing and incidents.open(FAILING, f"{needed} readiness completions in a row failed; "
                                               f"latest {result.error or result.failure_kind} ({result.failure_kind})"):
            opened.append(FAILING)
        if slow and incidents.open(SLOW, f"time to first token above the {spec.ttft_objective_ms} ms objective in {needed} "
                                         f"completions in a row; latest {result.ttft_ms:.0f} ms"):
            opened.append(SLOW)
        if result.ok:
            closed.extend(incidents.close(FAILING))
            if result.ttft_ms is None or result.ttft_ms <= spec.ttft_objective_ms:
                closed.extend(incidents.close(SLOW))
        if closed:
            incidents.recovered(closed, _probe_view(check))
        uow.commit()
        return ProbeOutcome(spec.name, probed=True, result=_probe_view(check), opened=tuple(opened), closed=tuple(closed))


class _Incidents:
    """Open and close one endpoint's incidents, with their audit rows and outbox events."""

    def __init__(self, ctx: Context, uow: SqlUnitOfWork, row: Endpoint, spec: EndpointSettings, now: dt.datetime) -> None:
        self.ctx, self.uow, self.row, self.spec, self.now = ctx, uow, row, spec, now

    def _mention(self) -> str:
        group = self.ctx.settings.oncall_group
        return f"<!subteam^{group}> " if group and self.spec.environment == "prod" else ""

    def open(self, kind: str, reason: str) -> bool:
        if self.uow.incidents.open_for(self.row.id, kind) is not None:
            return False  # already alerted: no storm
        self.uow.incidents.add(Incident(endpoint_id=self.row.id, kind=kind, open=True, reason=reason, opened_at=self.now))
        if kind == FAILING:
            text = f":red_circle: {self._mention()}Endpoint `{self.spec.name}` is not answering: {literal(reason)}."
        else:
            text = f":large_orange_circle: Endpoint `{self.spec.name}` is slow: {literal(reason)}."
        text += fast_path(self.spec)
        self.uow.audit.record(at=self.now, actor=ACTOR, action="incident.opened", subject=f"endpoint:{self.spec.name}",
                              details={"kind": kind, "reason": reason})
        self.uow.events.emit(ReadinessAlert(endpoint_name=self.spec.name, text=text, channel=self.spec.channel, incident=kind,
                                            reason=reason), at=self.now)
        return True

    def close(self, kind: str) -> list[str]:
        incident = self.uow.incidents.open_for(self.row.id, kind)
        if incident is None:
            return []
        incident.open = None  # NULL, not false: the unique (endpoint, kind, open) then allows many closed ones
        incident.closed_at = self.now
        self.uow.audit.record(at=self.now, actor=ACTOR, action="incident.closed", subject=f"endpoint:{self.spec.name}",
                              details={"kind": kind, "opened_at": incident.opened_at.isoformat(), "reason": incident.reason})
        return [kind]

    def recovered(self, kinds: list[str], probe: ProbeView) -> None:
        what = " and ".join("answering" if k == FAILING else "within its first-token objective" for k in kinds)
        text = f":large_green_circle: Endpoint `{self.spec.name}` is {what} again: {literal(probe.summary)}."
        self.uow.events.emit(ReadinessRecovered(endpoint_name=self.spec.name, text=text, channel=self.spec.channel,
                                                incidents=tuple(kinds)), at=self.now)


# ---------------------------------------------------------------------------- readers


def _status(ctx: Context, row: Endpoint, stored: EndpointSettings, live: Deployment | None, checks: list[ReadinessCheck],
            open_incidents: list[Incident]) -> EndpointStatus:
    """``stored``: the endpoint's settings as the database holds them (with limits accepted from a traffic gate)."""
    spec = ctx.settings.endpoint(row.name) or stored
    probes = [_probe_view(r) for r in checks]
    incidents = [IncidentView(kind=i.kind, reason=i.reason, opened_at=i.opened_at) for i in open_incidents]
    return EndpointStatus(
        name=row.name, kind=row.kind, environment=row.environment, url=row.url, admission_open=row.admission_open,
        live_release=live.release.name if live else None, live_since=live.updated_at if live else None,
        ttft_objective_ms=spec.ttft_objective_ms, last_probe=probes[0] if probes else None, recent_probes=probes,
        incidents=incidents, request_limits=stored.effective_request_limits,
        limits_accepted=stored.accepted_request_limits is not None,
        # The last rollout's cold start, kept on the endpoint's row by its readiness step (migration 0017).
        cold_start=ColdStart.from_dict(row.cold_start) if isinstance(row.cold_start, dict) else None,
        cold_start_at=row.cold_start_at if isinstance(row.cold_start, dict) else None, alerting=effective_alerting(ctx, spec),
        service_watch=side_watch(ctx, spec),
    )


def endpoint_status(ctx: Context, name: str | None = None, history: int = 10, *, observe: bool = True) -> list[EndpointStatus]:
    """Status of one endpoint (``name``) or of all, with the reservation each runs on.

    With ``observe`` (the default), each also carries the cluster's view beside the record (``cluster``),
    read within :data:`bot.services.status.OBSERVE_BUDGET_SECONDS`; ``cluster.known`` is False when it did not answer.
    """
    records: dict[str, tuple[EndpointSettings, Recorded, int | None]] = {}
    with ctx.uow() as uow:
        # Every table is read once for the whole page, whatever the number of endpoints.
        rows = [endpoint_row(uow, name)] if name else list(uow.endpoints.list())
        ids = [row.id for row in rows]
        incidents = uow.incidents.open_by_endpoint(INCIDENT_KINDS)
        snapshot = RecordSnapshot.read(uow, ids)
        checks = uow.readiness.recent_by_endpoint(ids, history)
        # The stored settings (validated once per change, bot/services/stored_settings.py): they hold the limits
        # accepted at a traffic gate.
        stored = {row.id: stored_settings(row.name, row.settings) for row in rows}
        # The deployment in flight on each endpoint, from the snapshot, with its gates (one query) and waiting report.
        gate_rows = uow.gates.for_deployments([d.id for d in snapshot.holders.values()])
        actors = uow.audit.actors([d.id for d in snapshot.holders.values()])
        flying = {eid: deployment_view(uow, d, gate_rows[d.id], actors[d.id]) for eid, d in snapshot.holders.items()}
        statuses = [replace(_status(ctx, row, stored[row.id], snapshot.live.get(row.id), checks[row.id],
                                    incidents.get(row.id, [])), in_flight=flying.get(row.id)) for row in rows]
        if observe:
            for row in rows:
                records[row.name] = (stored[row.id], *record_of(ctx, snapshot, row, stored[row.id]))
        holds = fallback_holds(uow, {e.name: e for e in ctx.settings.endpoints} | {r.name: stored[r.id] for r in rows})
    truths = {name: held(truth, records[name][0], holds.get(name))
              for name, truth in (cluster_truths(ctx, records) if observe else {}).items()}
    now = ctx.clock.now()
    usable: dict[str, list[ReservationView]] = {}
    for reservation in reservation_overview(ctx):
        if reservation.endpoint is not None and reservation.state in USABLE_STATES:
            usable.setdefault(reservation.endpoint, []).append(reservation)
    result: list[EndpointStatus] = []
    for status in statuses:
        mine = usable.get(status.name, [])
        # The reservation that matters is the one running now; else the next to start.
        current = next((r for r in mine if r.start is None or r.start <= now), mine[0] if mine else None)
        result.append(replace(status, reservation=current, cluster=truths.get(status.name)))
    return result


def status_version(ctx: Context) -> tuple[int, int]:
    """Moves whenever what :func:`endpoint_status` shows may have changed, whichever replica changed it.

    Every state change writes an audit row and every probe a readiness row, so the
    newest id of each is enough; the App Home compares it to know when to re-render.
    """
    with ctx.uow() as uow:
        return uow.audit.latest_id(), uow.readiness.latest_id()
