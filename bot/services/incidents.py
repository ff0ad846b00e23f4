"""The metrics watch's incidents: opened once, recovered once, acknowledged and silenced by people.

An incident is a row of ``incidents`` (at most one open per endpoint and kind, a database rule), opened
with an audit row and a :class:`~bot.domain.events.WatchAlert` in the watch's transaction and closed the
same way with one :class:`~bot.domain.events.WatchRecovered`. The alert carries what a person needs to act
on it: the live release, the last deployment and what it changed.

A silence is on the incident's kind for its endpoint, for a chosen time with a reason (audited): while it
holds, that kind opens and closes quietly (recorded, not posted). An acknowledgement names who took the
incident; the alert message says so in place.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from bot.adapters.store.models import Endpoint, Incident
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.alert_rules import KIND_LABEL
from bot.domain.chat_text import literal
from bot.domain.drills import seconds
from bot.domain.events import IncidentHandled, WatchAlert, WatchRecovered
from bot.services.access import Identity, authorize
from bot.services.context import Context, require
from bot.services.errors import NotFound, Refused, Unavailable
from bot.services.pair_sides import fast_path
from bot.services.transitions import live_deployment

ACTOR = "kimi-ops:metrics-watch"
SILENCE_CHOICES_HOURS = (1, 4, 24)
MAX_SILENCE = dt.timedelta(days=7)


def deployment_context(uow: SqlUnitOfWork, row: Endpoint) -> dict[str, Any]:
    """The live release, the endpoint's last deployment and what it changed, for an alert."""
    live = live_deployment(uow, row.id)
    last = next(iter(uow.deployments.for_endpoint(row.id, limit=1)), None)
    found: dict[str, Any] = {"live_release": live.release.name if live else None,
                             "live_since": live.updated_at.isoformat() if live else None}
    if last is not None:
        found["last_deployment"] = {"id": last.id, "kind": last.kind, "state": last.state, "release": last.release.name,
                                    "replaces": last.replaces_release.name if last.replaces_release else None,
                                    "at": last.updated_at.isoformat(), "channel": last.slack_channel,
                                    "thread_ts": last.slack_thread_ts}
    return found


class Incidents:
    """Opens and closes one endpoint's watch incidents inside the watch's transaction."""

    def __init__(self, ctx: Context, uow: SqlUnitOfWork, row: Endpoint, spec: EndpointSettings, now: dt.datetime,
                 open_now: dict[str, Incident], actor: str = ACTOR) -> None:
        self.ctx, self.uow, self.row, self.spec, self.now = ctx, uow, row, spec, now
        self.open_now, self.actor = open_now, actor
        self._context: dict[str, Any] | None = None

    def _mention(self) -> str:
        group = self.ctx.settings.oncall_group
        return f"<!subteam^{group}> " if group and self.spec.environment == "prod" else ""

    def open(self, kind: str, severity: str, reason: str) -> bool:
        if kind in self.open_now:
            return False  # already alerted: no storm
        silence = self.uow.incidents.silence_of(self.row.id, kind, self.now)
        incident = self.uow.incidents.add(Incident(endpoint_id=self.row.id, kind=kind, open=True, reason=reason,
                                                   opened_at=self.now, severity=severity))
        self.open_now[kind] = incident
        if self._context is None:
            self._context = deployment_context(self.uow, self.row)
        icon = ":rotating_light:" if severity == "page" else ":warning:"
        mention = self._mention() if severity == "page" else ""
        text = f"{icon} {mention}`{self.spec.name}` {kind}: {literal(reason)}.{fast_path(self.spec)}"
        self.uow.audit.record(at=self.now, actor=self.actor, action="incident.opened", subject=f"endpoint:{self.spec.name}",
                              details={"kind": kind, "severity": severity, "reason": reason, "incident_id": incident.id,
                                       "silenced_by": silence.silenced_by if silence else None})
        self.uow.events.emit(WatchAlert(endpoint_name=self.spec.name, channel=self.spec.channel, text=text,
                                        incident_id=incident.id, incident=kind, severity=severity, reason=reason,
                                        silenced=silence is not None, context=self._context), at=self.now)
        return True

    def close(self, kind: str, why: str) -> bool:
        incident = self.open_now.pop(kind, None)
        if incident is None:
            return False
        incident.open = None  # NULL, not false: the unique (endpoint, kind, open) then allows many closed ones
        incident.closed_at = self.now
        silence = self.uow.incidents.silence_of(self.row.id, kind, self.now)
        self.uow.audit.record(at=self.now, actor=self.actor, action="incident.closed", subject=f"endpoint:{self.spec.name}",
                              details={"kind": kind, "opened_at": incident.opened_at.isoformat(), "reason": incident.reason,
                                       "incident_id": incident.id})
        # The same words as a drill's recovery time ("4 s", "2 min 15 s"), never "0 min" beside "4 s".
        text = (f":large_green_circle: `{self.spec.name}` {kind} recovered after "
                f"{seconds(self.now - incident.opened_at)}: {literal(why)}.")
        self.uow.events.emit(WatchRecovered(endpoint_name=self.spec.name, channel=self.spec.channel, text=text,
                                            incident_id=incident.id, incident=kind, silenced=silence is not None),
                             at=self.now)
        return True


# ---------------------------------------------------------------------------- people


def _incident(uow: SqlUnitOfWork, incident_id: int) -> tuple[Incident, Endpoint]:
    incident = uow.incidents.get_for_update(incident_id)
    endpoint = next((e for e in uow.endpoints.list() if e.id == incident.endpoint_id), None) if incident else None
    if incident is None or endpoint is None:
        raise NotFound(f"no incident #{incident_id}; `/kimi status ENDPOINT` lists the open ones")
    return incident, endpoint


def acknowledge(ctx: Context, actor: Identity, incident_id: int) -> str:
    """Record who took the incident; the alert message says so."""
    authorize(ctx, actor, "incident", f"incident:{incident_id}")
    with ctx.uow() as uow:
        incident, endpoint = _incident(uow, incident_id)
        if incident.acknowledged_by:
            return f"incident #{incident.id} ({incident.kind}) was already acknowledged by {incident.acknowledged_by}"
        now = ctx.clock.now()
        incident.acknowledged_by, incident.acknowledged_at = actor.user_id, now
        uow.audit.record(at=now, actor=actor.user_id, action="incident.acknowledged", subject=f"endpoint:{endpoint.name}",
                         details={"incident_id": incident.id, "kind": incident.kind})
        uow.events.emit(IncidentHandled(endpoint_name=endpoint.name, text="", incident_id=incident.id,
                                        action="acknowledged", actor=actor.user_id), at=now)
        uow.commit()
        return f"incident #{incident.id} ({incident.kind} on {endpoint.name}) acknowledged"


def silence(ctx: Context, actor: Identity, incident_id: int, hours: float, reason: str) -> str:
    """Silence the incident's kind on its endpoint for ``hours`` (at most a week), with a reason."""
    reason = " ".join(reason.split())
    if not reason:
        raise Refused("a silence needs a reason, e.g. `node drain scheduled by AWS, ticket OPS-123`")
    duration = dt.timedelta(hours=hours)
    if not dt.timedelta(0) < duration <= MAX_SILENCE:
        raise Refused("silence for more than 0 hours and at most 7 days (168 hours)")
    authorize(ctx, actor, "incident", f"incident:{incident_id}")
    with ctx.uow() as uow:
        incident, endpoint = _incident(uow, incident_id)
        now = ctx.clock.now()
        # An alert Prometheus raised is silenced where it is routed too, before anything here changes.
        in_alertmanager = _silence_in_alertmanager(ctx, incident, endpoint, now, now + duration, actor, reason[:500])
        incident.silenced_until, incident.silenced_by, incident.silence_reason = now + duration, actor.user_id, reason[:500]
        uow.audit.record(at=now, actor=actor.user_id, action="incident.silenced", subject=f"endpoint:{endpoint.name}",
                         details={"incident_id": incident.id, "kind": incident.kind, "hours": hours, "reason": reason[:500],
                                  "until": (now + duration).isoformat(), "alertmanager_silence": in_alertmanager})
        uow.events.emit(IncidentHandled(endpoint_name=endpoint.name, text="", incident_id=incident.id, action="silenced",
                                        actor=actor.user_id), at=now)
        uow.commit()
        return f"{incident.kind} on {endpoint.name} silenced for {hours:g} h: {literal(reason[:500])}"


def _silence_in_alertmanager(ctx: Context, incident: Incident, endpoint: Endpoint, starts: dt.datetime,
                             ends: dt.datetime, actor: Identity, reason: str) -> str | None:
    """The Alertmanager silence's id for an incident Alertmanager raised (None for the built-in watch's)."""
    if incident.fingerprint is None:
        return None
    silences = require(ctx.ports.silences, "Alertmanager", "set KIMI_ALERTMANAGER_URL to silence the alerts it sends")
    try:
        return silences.create_silence({"endpoint": endpoint.name, KIND_LABEL: incident.kind}, starts, ends,
                                       created_by=actor.user_id, comment=reason)
    except Exception as exc:  # said in one line; nothing was silenced here either
        raise Unavailable(f"Alertmanager did not create the silence, so nothing was silenced: {exc}") from exc


def rollback_target(ctx: Context, incident_id: int) -> str:
    """What a Roll back click rolls back: the incident's endpoint, or for a side of a pair its service.

    A side is never rolled back on its own (``request_rollback`` refuses it); its service's rollback moves every
    user back to the side kept warm in one route change, the alert's "Fast path back". The rollback itself
    decides (and refuses) as ``/kimi rollback`` does.
    """
    with ctx.uow() as uow:
        _, endpoint = _incident(uow, incident_id)
        pair = EndpointSettings.model_validate(endpoint.settings).pair  # as stored, as ``request_rollback`` reads it
        return pair.service if pair is not None else endpoint.name
