"""One run of the reservation watch inside one unit of work: store what AWS said, match, warn, alert, escalate."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bot.adapters.store.models import Incident, Reservation
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.chat_text import literal
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
    rearm,
    short_id,
    threshold_to_announce,
    when,
)
from bot.domain.reservations import ReservationInfo
from bot.services.context import Context
from bot.services.reservations.rows import (
    ACTOR,
    MISMATCH_PREFIX,
    MISSING_INCIDENT,
    WATCH_INCIDENT,
    WatchReport,
    info_of,
    markers_of,
    read_all,
    store_alerts,
    thresholds_sent,
)
from bot.services.transitions import live_deployment


class Watch:
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
        return replace(info_of(row), target_resources=fresh.target_resources, platform=fresh.platform) if fresh else info_of(row)

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
        old = info_of(row)
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
                store_alerts(row, rearm(info.end - self.now, thresholds_sent(row)), markers_of(row))
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
        self._say(ReservationGone, row, f"Reservation {describe(info_of(row))} {how}", ended=ended_naturally)
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
        markers = markers_of(row)
        known = {m for m in markers if m.startswith(MISMATCH_PREFIX)}
        new = sorted(wanted - known)
        if new and endpoint is not None:
            text = (f":warning: Reservation {describe(info_of(row))} does not fit endpoint `{endpoint.name}`: "
                    + "; ".join(m.removeprefix(MISMATCH_PREFIX) for m in new)
                    + ". Fix the reservation or the endpoint's settings before the next deployment.")
            self._say(ReservationMismatch, row, text, problems=[m.removeprefix(MISMATCH_PREFIX) for m in new])
            self.report.warnings.append(f"{short_id(row.id)} mismatch")
        if wanted != known:
            store_alerts(row, thresholds_sent(row), (markers - known) | wanted)

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
        text = (f":rotating_light: {self._mention()} Reservation {describe(info_of(row))} behind live endpoint "
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
            sent = thresholds_sent(row)
            fire, after = threshold_to_announce(remaining, configured, sent)
            if after != sent:
                store_alerts(row, after, markers_of(row))
            if fire is None:
                continue
            takeover = self.replacement(row, row.end_at)
            live = row.endpoint_name in self.live
            escalate = live and takeover is None
            left = format_remaining(remaining)
            ending = "has ended" if left == "ended" else f"ends in {left}"
            text = (f":hourglass_flowing_sand: Reservation {describe(info_of(row))} for endpoint `{row.endpoint_name}` "
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
                 f":warning: The reservation watch is blind for endpoint `{spec.name}`: {literal(reason)}. No reservation alert "
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
        watch = Watch(ctx, uow, report)
        watch.apply_seen(seen, regions_read)
        uow.flush()
        watch.match_all()
        watch.thresholds()
        watch.aws_health(errors)
        watch.coverage(regions_read)
        uow.commit()
    return report
