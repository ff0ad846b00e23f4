"""Reservation watch: what reserved capacity exists, whose it is, and how long it has left.

``watch_reservations`` reads Capacity Blocks and training plans in every watched
region (``KIMI_AWS_REGIONS`` plus each endpoint's region) through the
``reservations`` adapter, stores what it saw in the ``reservations`` table and,
in the same transaction, writes one audit row and one outbox event for every
change:

* a reservation that appears, changes state, moves its end, or disappears;
* a reservation matched to an endpoint (the endpoint's ``reservation_id``,
  else the same region, kind, instance type and, when named, zone) whose
  instance type, kind or Availability Zone does not fit that endpoint;
* thresholds before the end (``KIMI_ALERT_THRESHOLDS_HOURS``): each fires once
  per reservation; the thresholds already sent are stored in ``alerts_sent`` so
  a restart neither repeats nor skips one. When several are crossed at once
  (the bot was down, or a reservation was shortened) one alert is sent for the
  smallest and the larger ones are marked as sent. An extension re-arms the
  thresholds that are no longer crossed;
* an escalation mentioning ``KIMI_ONCALL_GROUP`` when a live endpoint's
  reservation ends (or is cancelled or vanishes) and nothing tested can take
  over: no other endpoint with a live deployment (it passed its gates) whose
  reservation lasts longer. A bare reservation fitting the endpoint is not
  tested: it is named in the page as the place to deploy, never a reason to stay
  quiet.

A region the adapter could not read changes nothing: its reservations are
never declared gone because AWS did not answer. Instead each endpoint in that
region gets one warning (an open ``reservation-watch`` incident) that the watch
is blind, and one note when it reads AWS again. Likewise a live endpoint with
no usable reservation the watch can see (a ``no-reservation`` incident).

``alerts_sent`` holds the thresholds (numbers, in hours) already announced and
``"mismatch:…"`` strings for fit warnings already given, so neither repeats.
The pure rules (matching, fit, thresholds) live in :mod:`bot.domain.expiry`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bot.adapters.aws.errors import aws_error_text
from bot.adapters.store.models import Incident, Reservation
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.events import (
    EndpointIncidentNotice,
    ReservationAlert,
    ReservationAppeared,
    ReservationChanged,
    ReservationEscalation,
    ReservationFound,
    ReservationGone,
    ReservationMismatch,
    ReservationMissing,
    ReservationNotice,
    ReservationWatchFailed,
    ReservationWatchRecovered,
)
from bot.domain.expiry import (
    USABLE_STATES,
    describe,
    expected_kind,
    fits,
    fmt_hours,
    format_remaining,
    match_endpoint,
    mismatches,
    names_reservation,
    rearm,
    short_id,
    threshold_to_announce,
    when,
)
from bot.domain.infrastructure import select_reservation
from bot.domain.reservations import ReservationInfo, same_instance_type
from bot.logs import logger_for
from bot.services.context import Context, require
from bot.services.errors import NotFound
from bot.services.transitions import live_deployment

log = logger_for(__name__)

ACTOR = "kimi-ops:reservation-watch"
DEFAULT_INSTANCE_TYPE = "p6-b300.48xlarge"
MISMATCH_PREFIX = "mismatch:"
WATCH_INCIDENT = "reservation-watch"
MISSING_INCIDENT = "no-reservation"


# ---------------------------------------------------------------------------- read models


@dataclass(frozen=True, kw_only=True)
class ReservationView(ReservationInfo):
    """A stored reservation as ``/kimi reservations`` and ``kimi-ops reservations`` show it: what AWS
    said (the :class:`ReservationInfo` fields) plus what the watch knows about it."""

    endpoint: str | None
    left: dt.timedelta | None
    alerts_sent_hours: list[float]
    first_seen_at: dt.datetime
    last_seen_at: dt.datetime
    gone_at: dt.datetime | None


@dataclass
class WatchReport:
    """What one run of the watch saw and did."""

    seen: int = 0
    appeared: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    escalations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        parts = [f"{self.seen} reservation(s) seen"]
        for label, items in (("appeared", self.appeared), ("changed", self.changed), ("gone", self.gone),
                             ("alerts", self.alerts), ("escalations", self.escalations), ("warnings", self.warnings)):
            if items:
                parts.append(f"{label}: {', '.join(items)}")
        if self.errors:
            parts.append("could not read " + "; ".join(self.errors))
        return "; ".join(parts)


# ---------------------------------------------------------------------------- the watch


def _info(row: Reservation) -> ReservationInfo:
    return ReservationInfo(
        id=row.id, kind=row.kind, region=row.region, instance_type=row.instance_type,  # type: ignore[arg-type]
        availability_zone=row.availability_zone, instance_count=row.instance_count,
        start=row.start_at, end=row.end_at, state=row.state,
    )


def _thresholds(row: Reservation) -> set[float]:
    return {float(x) for x in row.alerts_sent or [] if isinstance(x, (int, float))}


def _markers(row: Reservation) -> set[str]:
    return {x for x in row.alerts_sent or [] if isinstance(x, str)}


def _store_alerts(row: Reservation, thresholds: set[float], markers: set[str]) -> None:
    # A new list object so SQLAlchemy sees the JSON column change.
    row.alerts_sent = sorted(thresholds, reverse=True) + sorted(markers)


def _regions(ctx: Context) -> list[str]:
    regions = list(dict.fromkeys([*ctx.settings.aws_regions, *(e.region for e in ctx.settings.endpoints)]))
    return regions


def _instance_types(ctx: Context, region: str) -> list[str]:
    wanted = [e.instance_type.removeprefix("ml.") for e in ctx.settings.endpoints if e.region == region]
    return list(dict.fromkeys([*wanted, DEFAULT_INSTANCE_TYPE]))


def read_all(ctx: Context) -> tuple[dict[str, ReservationInfo], set[str], dict[str, str]]:
    """Ask AWS, region by region: ``(reservations by id, regions read, error by region)``; no transaction is open."""
    source = require(ctx.ports.reservations, "AWS access", "to read reservations; give this process AWS credentials and regions")
    seen: dict[str, ReservationInfo] = {}
    read: set[str] = set()
    errors: dict[str, str] = {}
    for region in _regions(ctx):
        types = _instance_types(ctx, region)
        try:
            found: list[ReservationInfo] = []
            for instance_type in types:
                found.extend(source.capacity_blocks(region, instance_type))
            # A plan an endpoint names is kept whatever it holds, so a wrong one is warned about, not ignored.
            named = [e.reservation_id for e in ctx.settings.endpoints if e.region == region and e.reservation_id]
            found.extend(p for p in source.training_plans(region)
                          if any(same_instance_type(p.instance_type, t) for t in types)
                          or any(names_reservation(p.id, wanted) for wanted in named))
        except Exception as exc:  # AWS unreachable or refusing: report it, change nothing in that region
            log.warning("reading reservations in %s failed: %s", region, exc, exc_info=True)
            errors[region] = aws_error_text(exc)
            continue
        read.add(region)
        for info in found:
            # Normalise the state's case: EC2 says ``active``, SageMaker ``Active``.
            seen[info.id] = replace(info, state=info.state.lower())
    return seen, read, errors


class _Watch:
    """One run of the watch inside one unit of work."""

    def __init__(self, ctx: Context, uow: SqlUnitOfWork, report: WatchReport) -> None:
        self.ctx = ctx
        self.uow = uow
        self.report = report
        self.now = ctx.clock.now()
        self.endpoints = list(ctx.settings.endpoints)
        self.by_name = {e.name: e for e in self.endpoints}
        self.live = self._live_endpoints()
        # What AWS said in this run: it carries what the stored row does not (a plan's TargetResources, a block's
        # platform), so fit and replacement are judged on it whenever the reservation was just read.
        self.seen: dict[str, ReservationInfo] = {}

    def info(self, row: Reservation) -> ReservationInfo:
        fresh = self.seen.get(row.id)
        return replace(_info(row), target_resources=fresh.target_resources, platform=fresh.platform) if fresh else _info(row)

    def _live_endpoints(self) -> set[str]:
        return endpoints_with_tested_release(self.uow, self.endpoints)

    # -- outbox and audit, always together
    def _say(self, kind: type[ReservationNotice], row: Reservation, text: str, **details: Any) -> None:
        endpoint = self.by_name.get(row.endpoint_name or "")
        self.uow.events.emit(kind(endpoint_name=row.endpoint_name, text=text, channel=endpoint.channel if endpoint else None,
                                  reservation_id=row.id, details=details), at=self.now)
        self.uow.audit.record(at=self.now, actor=ACTOR, action=kind.KIND, subject=f"reservation:{row.id}",
                              details={"text": text, **details})

    def _mention(self) -> str:
        group = self.ctx.settings.oncall_group
        return f"<!subteam^{group}>" if group else "(no on-call group configured: set KIMI_ONCALL_GROUP)"

    # -- storing what was seen
    def apply_seen(self, seen: dict[str, ReservationInfo], regions_read: set[str]) -> None:
        # Locked: a manual `jobs run` racing the scheduled watch waits here, then sees the alerts already sent.
        rows = {row.id: row for row in self.uow.reservations.list(include_gone=True, for_update=True)}
        self.seen = dict(seen)
        for info in seen.values():
            row = rows.get(info.id)
            if row is None:
                if info.state not in USABLE_STATES and (info.end is None or info.end <= self.now):
                    continue  # long-finished history: nothing to announce or watch
                row = self.uow.reservations.add(Reservation(
                    id=info.id, kind=info.kind, region=info.region, instance_type=info.instance_type,
                    availability_zone=info.availability_zone, instance_count=info.instance_count,
                    start_at=info.start, end_at=info.end, state=info.state, endpoint_name=None,
                    alerts_sent=[], first_seen_at=self.now, last_seen_at=self.now, gone_at=None,
                ))
                self._match(row)
                self._say(ReservationAppeared, row,
                          f"New reservation {describe(info)}: {info.state}, ends {when(info.end)} "
                          f"({format_remaining(info.remaining(self.now))} left)"
                          + (f", for endpoint `{row.endpoint_name}`" if row.endpoint_name else ", matched to no endpoint"),
                          state=info.state, end=info.end.isoformat() if info.end else None)
                self.report.appeared.append(short_id(info.id))
                continue
            self._update(row, info)
        for row in rows.values():
            if row.gone_at is None and row.region in regions_read and row.id not in seen:
                self._gone(row)

    def _update(self, row: Reservation, info: ReservationInfo) -> None:
        old = _info(row)
        row.last_seen_at = self.now
        if row.gone_at is not None:
            row.gone_at = None
            self._say(ReservationAppeared, row,
                      f"Reservation {describe(info)} is listed again: {info.state}, ends {when(info.end)}",
                      state=info.state)
            self.report.appeared.append(short_id(info.id))
        row.kind, row.region, row.instance_type = info.kind, info.region, info.instance_type
        row.availability_zone, row.instance_count, row.start_at = info.availability_zone, info.instance_count, info.start
        if info.state != old.state:
            row.state = info.state
            self._say(ReservationChanged, row, f"Reservation {describe(info)} is now {info.state} (was {old.state})",
                      change="state", before=old.state, after=info.state)
            self.report.changed.append(f"{short_id(info.id)} {old.state}→{info.state}")
            if info.state not in USABLE_STATES and info.end is not None and info.end > self.now:
                self._escalate_early_end(row, f"is {info.state}")
        if info.end != old.end:
            row.end_at = info.end
            later = old.end is not None and info.end is not None and info.end > old.end
            if later and info.end is not None:
                _store_alerts(row, rearm(info.end - self.now, _thresholds(row)), _markers(row))
            verb = "extended" if later else "moved"
            self._say(ReservationChanged, row,
                      f"Reservation {describe(info)} {verb}: now ends {when(info.end)} (was {when(old.end)}), "
                      f"{format_remaining(info.remaining(self.now))} left",
                      change="end", before=old.end.isoformat() if old.end else None,
                      after=info.end.isoformat() if info.end else None)
            self.report.changed.append(f"{short_id(info.id)} {verb}")
        if (old.availability_zone, old.instance_type) != (info.availability_zone, info.instance_type):
            self.uow.audit.record(at=self.now, actor=ACTOR, action="reservation.updated", subject=f"reservation:{row.id}",
                                  details={"availability_zone": info.availability_zone, "instance_type": info.instance_type})

    def _gone(self, row: Reservation) -> None:
        row.gone_at = self.now
        ended_naturally = row.end_at is not None and row.end_at <= self.now
        how = "ended and is no longer listed" if ended_naturally else "is no longer listed by AWS (cancelled or removed)"
        self._say(ReservationGone, row, f"Reservation {describe(_info(row))} {how}", ended=ended_naturally)
        self.report.gone.append(short_id(row.id))
        if not ended_naturally:
            self._escalate_early_end(row, "disappeared")

    # -- endpoints
    def _match(self, row: Reservation) -> None:
        endpoint = match_endpoint(self.info(row), self.endpoints)
        name = endpoint.name if endpoint else None
        if name != row.endpoint_name:
            self.uow.audit.record(at=self.now, actor=ACTOR, action="reservation.matched", subject=f"reservation:{row.id}",
                                  details={"endpoint": name, "before": row.endpoint_name})
            row.endpoint_name = name

    def match_all(self) -> None:
        for row in self.uow.reservations.list():
            self._match(row)
            self._check_fit(row)

    def _check_fit(self, row: Reservation) -> None:
        if row.id not in self.seen:
            return  # not read this run (its region did not answer, or it is gone): nothing new to judge
        endpoint = self.by_name.get(row.endpoint_name or "")
        problems = mismatches(self.info(row), endpoint) if endpoint else []
        wanted = {f"{MISMATCH_PREFIX}{p}" for p in problems}
        markers = _markers(row)
        known = {m for m in markers if m.startswith(MISMATCH_PREFIX)}
        new = sorted(wanted - known)
        if new and endpoint is not None:
            text = (f":warning: Reservation {describe(_info(row))} does not fit endpoint `{endpoint.name}`: "
                    + "; ".join(m.removeprefix(MISMATCH_PREFIX) for m in new)
                    + ". Fix the reservation or the endpoint's settings before the next deployment.")
            self._say(ReservationMismatch, row, text, problems=[m.removeprefix(MISMATCH_PREFIX) for m in new])
            self.report.warnings.append(f"{short_id(row.id)} mismatch")
        if wanted != known:
            _store_alerts(row, _thresholds(row), (markers - known) | wanted)

    # -- thresholds and escalation
    def replacement(self, row: Reservation, ends: dt.datetime) -> str | None:
        """What tested capacity can take over when ``row`` ends at ``ends``, or ``None``.

        Tested means an endpoint that passed its gates: another live endpoint whose capacity lasts past the end.
        A bare reservation that fits is not tested (nothing was deployed on it, no gate ran): it never stops the
        page, and :meth:`untested` names it in the page so the on-call person knows where to deploy.
        """
        others = [r for r in self.uow.reservations.list() if r.id != row.id and r.state in USABLE_STATES]
        for other in others:
            if (other.endpoint_name and other.endpoint_name != row.endpoint_name and other.endpoint_name in self.live
                    and other.end_at is not None and other.end_at > ends
                    and (other.start_at is None or other.start_at <= ends)):
                return f"live endpoint `{other.endpoint_name}` has capacity until {when(other.end_at)}"
        return None

    def untested(self, row: Reservation, ends: dt.datetime) -> str:
        """A reservation that fits the endpoint past ``ends`` but runs no tested release: said in the page."""
        endpoint = self.by_name.get(row.endpoint_name or "")
        if endpoint is None:
            return ""
        for other in self.uow.reservations.list():
            if (other.id != row.id and other.state in USABLE_STATES and other.end_at is not None and other.end_at > ends
                    and (other.start_at is None or other.start_at <= ends) and fits(self.info(other), endpoint)):
                return (f" Reservation `{short_id(other.id)}` fits until {when(other.end_at)} but no endpoint on it "
                        "passed its gates: deploy there before the end.")
        return ""

    def _escalate_early_end(self, row: Reservation, what: str) -> None:
        if row.endpoint_name not in self.live:
            return
        if self.replacement(row, self.now) is not None:
            return
        text = (f":rotating_light: {self._mention()} Reservation {describe(_info(row))} behind live endpoint "
                f"`{row.endpoint_name}` {what} before its end ({when(row.end_at)}) and no tested endpoint or reservation "
                "can take over. Reserve capacity now." + self.untested(row, self.now))
        self._say(ReservationEscalation, row, text, reason=what, oncall_group=self.ctx.settings.oncall_group)
        self.report.escalations.append(short_id(row.id))

    def thresholds(self) -> None:
        configured = [float(t) for t in self.ctx.settings.alert_thresholds_hours]
        for row in self.uow.reservations.list():
            if row.endpoint_name is None or row.end_at is None or row.state not in USABLE_STATES:
                continue
            remaining = row.end_at - self.now
            sent = _thresholds(row)
            fire, after = threshold_to_announce(remaining, configured, sent)
            if after != sent:
                _store_alerts(row, after, _markers(row))
            if fire is None:
                continue
            takeover = self.replacement(row, row.end_at)
            live = row.endpoint_name in self.live
            escalate = live and takeover is None
            left = format_remaining(remaining)
            ending = "has ended" if left == "ended" else f"ends in {left}"
            text = (f":hourglass_flowing_sand: Reservation {describe(_info(row))} for endpoint `{row.endpoint_name}` "
                    f"{ending} ({when(row.end_at)}; alert at {fmt_hours(fire)}).")
            if escalate:
                text = (f":rotating_light: {self._mention()} " + text.split(" ", 1)[1]
                        + " The endpoint is live and no tested endpoint or reservation can take over: "
                          "extend the reservation or reserve new capacity now." + self.untested(row, row.end_at))
            elif takeover:
                text += f" Taking over: {takeover}."
            elif not live:
                text += " The endpoint has no live release."
            kind: type[ReservationNotice] = ReservationEscalation if escalate else ReservationAlert
            self._say(kind, row, text, threshold_hours=fire, remaining_seconds=int(remaining.total_seconds()),
                      oncall_group=self.ctx.settings.oncall_group if escalate else None)
            (self.report.escalations if escalate else self.report.alerts).append(f"{short_id(row.id)}@{fmt_hours(fire)}")


    # -- endpoint-level incidents: said once when they start, once when they end
    def _incident(self, spec: EndpointSettings, kind: str, active: bool, reason: str,
                  opened: tuple[type[EndpointIncidentNotice], str], closed: tuple[type[EndpointIncidentNotice], str]) -> None:
        """Open (``active``) or close one ``kind`` incident of an endpoint; ``opened``/``closed`` are (event kind, text)."""
        row = self.uow.endpoints.get(spec.name)
        if row is None:
            return
        incident = self.uow.incidents.open_for(row.id, kind)
        subject = f"endpoint:{spec.name}"
        if active and incident is None:
            self.uow.incidents.add(Incident(endpoint_id=row.id, kind=kind, open=True, reason=reason, opened_at=self.now))
            self.uow.audit.record(at=self.now, actor=ACTOR, action="incident.opened", subject=subject,
                                  details={"kind": kind, "reason": reason})
            event, text = opened
        elif not active and incident is not None:
            incident.open, incident.closed_at = None, self.now  # NULL: the unique open (endpoint, kind) allows many closed
            self.uow.audit.record(at=self.now, actor=ACTOR, action="incident.closed", subject=subject,
                                  details={"kind": kind, "reason": incident.reason})
            event, text = closed
        else:
            return
        self.uow.events.emit(event(endpoint_name=spec.name, text=text, channel=spec.channel, region=spec.region, incident=kind),
                             at=self.now)
        self.report.warnings.append(f"{spec.name} {event.KIND.removeprefix('reservation.')}")

    def aws_health(self, errors: dict[str, str]) -> None:
        """Warn once per endpoint while its region cannot be read, and once when it can again.

        Without this, expired credentials would silently stop every alert before a reservation ends.
        """
        for spec in self.endpoints:
            reason = f"AWS in {spec.region} cannot be read: {errors.get(spec.region)}"
            self._incident(
                spec, WATCH_INCIDENT, spec.region in errors, reason,
                (ReservationWatchFailed,
                 f":warning: The reservation watch is blind for endpoint `{spec.name}`: {reason}. No reservation alert "
                 "can be sent until it reads AWS again; check this process's AWS credentials and permissions."),
                (ReservationWatchRecovered,
                 f":large_green_circle: The reservation watch reads AWS in {spec.region} again for endpoint `{spec.name}`."),
            )

    def coverage(self, regions_read: set[str]) -> None:
        """Warn once when a live endpoint has no usable reservation the watch can see (its capacity has no known end)."""
        covered = {r.endpoint_name for r in self.uow.reservations.list() if r.state in USABLE_STATES and r.endpoint_name}
        for spec in self.endpoints:
            if spec.region not in regions_read:
                continue  # unknown, not missing: aws_health speaks for that region
            missing = spec.name in self.live and spec.name not in covered
            wanted = (spec.reservation_id
                      or f"a {expected_kind(spec)} of {spec.instance_type} in {spec.availability_zone or spec.region}")
            self._incident(
                spec, MISSING_INCIDENT, missing, f"no usable reservation found ({wanted})",
                (ReservationMissing,
                 f":warning: {self._mention()} Live endpoint `{spec.name}` runs on no reservation the watch can see "
                 f"(looked for {wanted}): nothing will warn before its capacity goes. Reserve capacity or fix the "
                 "endpoint's reservation settings."),
                (ReservationFound, f":large_green_circle: Endpoint `{spec.name}` has a reservation the watch can see again."),
            )


def endpoints_with_tested_release(uow: SqlUnitOfWork, endpoints: Sequence[EndpointSettings]) -> set[str]:
    """Endpoints running a release that passed its gates: a live deployment, and on a side of a pair nothing newer
    stored for the cluster since (a side whose deploy failed after its apply keeps the failed release: it is
    no tested replacement, though its earlier deployment is still the one recorded live)."""
    found: set[str] = set()
    for endpoint in endpoints:
        row = uow.endpoints.get(endpoint.name)
        live = live_deployment(uow, row.id) if row is not None else None
        if row is None or live is None:
            continue
        if endpoint.pair is not None and any(
                d.id > live.id and d.applied_manifest is not None for d in uow.deployments.for_endpoint(row.id, 10)):
            continue
        found.add(endpoint.name)
    return found


def watch_reservations(ctx: Context) -> WatchReport:
    """One run of the reservation watch; returns what it saw and announced."""
    report = WatchReport()
    seen, regions_read, errors = read_all(ctx)
    report.seen = len(seen)
    report.errors = [f"{region}: {error}" for region, error in errors.items()]
    with ctx.uow() as uow:
        watch = _Watch(ctx, uow, report)
        watch.apply_seen(seen, regions_read)
        uow.flush()
        watch.match_all()
        watch.thresholds()
        watch.aws_health(errors)
        watch.coverage(regions_read)
        uow.commit()
    return report


# ---------------------------------------------------------------------------- readers


def _view(row: Reservation, now: dt.datetime) -> ReservationView:
    info = _info(row)
    return ReservationView(
        **vars(info), endpoint=row.endpoint_name, left=info.remaining(now),
        alerts_sent_hours=sorted(_thresholds(row), reverse=True), first_seen_at=row.first_seen_at,
        last_seen_at=row.last_seen_at, gone_at=row.gone_at,
    )


def reservation_overview(ctx: Context, include_gone: bool = False) -> list[ReservationView]:
    """What the watch last saw, soonest end first."""
    now = ctx.clock.now()
    with ctx.uow() as uow:
        return [_view(row, now) for row in uow.reservations.list(include_gone=include_gone)]


def reservations_of(ctx: Context, endpoint_name: str) -> list[ReservationView]:
    """The stored reservations matched to one endpoint (soonest end first)."""
    return [v for v in reservation_overview(ctx) if v.endpoint == endpoint_name]


def reservation_for(ctx: Context, endpoint: EndpointSettings | str, *, fresh: bool = True) -> ReservationInfo | None:
    """The reservation an endpoint deploys onto: the one it names, else the latest-ending usable fit.

    ``fresh`` asks AWS now (the infrastructure gate); otherwise the watch's last
    stored view is used (status pages), which needs no AWS access.
    """
    if isinstance(endpoint, str):
        spec = ctx.settings.endpoint(endpoint)
        if spec is None:
            raise NotFound(f"no endpoint named {endpoint}; `/kimi reservations` lists what is watched")
        endpoint = spec
    if fresh:
        source = require(ctx.ports.reservations, "AWS access", "to read reservations; give this process AWS credentials")
        if endpoint.kind == "hyperpod":
            candidates = source.training_plans(endpoint.region)
        else:
            candidates = source.capacity_blocks(endpoint.region, endpoint.instance_type.removeprefix("ml."))
    else:
        with ctx.uow() as uow:
            candidates = [_info(row) for row in uow.reservations.list() if row.region == endpoint.region]
    return select_reservation(
        candidates,
        reservation_id=_resolve_named(candidates, endpoint.reservation_id),
        instance_type=endpoint.instance_type,
        availability_zone=endpoint.availability_zone,
        kind=expected_kind(endpoint),
    )


def _resolve_named(candidates: Sequence[ReservationInfo], wanted: str | None) -> str | None:
    """Turn a training plan's name into its ARN so ``select_reservation`` finds it."""
    if not wanted:
        return None
    return next((c.id for c in candidates if names_reservation(c.id, wanted)), wanted)


# ---------------------------------------------------------------------------- the reservation-expiry drill


@dataclass(frozen=True)
class ExpiryRehearsal:
    """What the watch would say at the endpoint's reservation's last alert, on a moved clock (nothing kept)."""

    reservation: str | None  # short id; None when the endpoint has no reservation the watch knows
    ends: dt.datetime | None = None
    alert_at: dt.datetime | None = None
    alert: str | None = None  # the notice it would send: reservation.escalation (a page) or reservation.alert
    takeover: str | None = None  # the tested endpoint that would take over, if any


def rehearse_expiry(ctx: Context, endpoint_name: str) -> ExpiryRehearsal:
    """Run the watch's thresholds at the endpoint's reservation's last alert, as if none had been sent; roll back.

    The clock is moved to one minute past the smallest threshold before the end of the endpoint's usable
    reservation that ends last; the stored reservations, the tested endpoints and the on-call settings are the
    real ones, so the answer is what the watch will do then unless something changes meanwhile.
    """
    from bot.adapters.clock import FrozenClock

    with ctx.uow() as uow:
        rows = [r for r in uow.reservations.list()
                if r.endpoint_name == endpoint_name and r.state in USABLE_STATES and r.end_at is not None]
        if not rows:
            return ExpiryRehearsal(None)
        row = max(rows, key=lambda r: r.end_at or dt.datetime.min.replace(tzinfo=dt.UTC))
        assert row.end_at is not None
        last = min(float(t) for t in ctx.settings.alert_thresholds_hours)
        at = row.end_at - dt.timedelta(hours=last) + dt.timedelta(minutes=1)
        for each in rows:
            _store_alerts(each, set(), _markers(each))  # as if nothing was announced yet (rolled back below)
        uow.flush()
        report = WatchReport()
        watch = _Watch(replace(ctx, clock=FrozenClock(at)), uow, report)
        watch.thresholds()
        mine = short_id(row.id)
        alert = ("reservation.escalation" if any(e.startswith(f"{mine}@") for e in report.escalations)
                 else "reservation.alert" if any(e.startswith(f"{mine}@") for e in report.alerts) else None)
        takeover = watch.replacement(row, row.end_at)
        uow.rollback()  # a rehearsal: no alert sent, nothing stored
        return ExpiryRehearsal(mine, row.end_at, at, alert, takeover)
