"""What services tell the chat through the ``events`` outbox: one frozen dataclass per event kind.

A service writes an event in the same transaction as the change it reports
(``uow.events.emit(GateWaiting(...), at=now)``); the notifier delivers it
afterwards. Each class names its outbox ``KIND`` (the string stored in the
row). ``deployment_id`` and ``endpoint_name`` become the row's own columns;
every other field is a key of the row's JSON payload, under the field's name
unless its metadata gives ``key`` (``from`` is a Python keyword). A field whose
metadata says ``spread`` holds free-form details stored at the payload's top
level beside the named keys, as the audit row holds them. The store adapter
(:mod:`bot.adapters.store.outbox`) is the one place that turns an event into a
row and back, so the stored rows keep the shape they always had.

Alerts for a channel rather than a deployment thread derive from
:class:`ChannelNotice`: their ``text`` goes to ``channel`` (or the endpoint's).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, ClassVar

SPREAD = {"spread": True}


def _key(name: str) -> dict[str, str]:
    return {"key": name}


@dataclass(frozen=True, kw_only=True)
class OutboxEvent:
    """Base of every outbox event; ``KIND`` is what the row's ``kind`` column holds (empty: not stored itself)."""

    KIND: ClassVar[str] = ""
    deployment_id: int | None = None
    endpoint_name: str | None = None


# ---------------------------------------------------------------------------- a deployment's thread


@dataclass(frozen=True, kw_only=True)
class DeploymentRequested(OutboxEvent):
    """A deployment was opened: the notifier posts its thread's root message."""

    KIND: ClassVar[str] = "deployment.requested"
    deployment_id: int
    release: str | None
    kind: str
    replaces: int | None = None


@dataclass(frozen=True, kw_only=True)
class StateChanged(OutboxEvent):
    """A deployment moved; ``details`` are the step's own facts (manifest hash, timings, …)."""

    KIND: ClassVar[str] = "deployment.state"
    deployment_id: int
    from_state: str = field(metadata=_key("from"))
    to_state: str = field(metadata=_key("to"))
    reason: str | None
    release: str
    kind: str
    details: dict[str, Any] = field(default_factory=dict, metadata=SPREAD)


@dataclass(frozen=True, kw_only=True)
class GateWaiting(OutboxEvent):
    """A gate's checks ran and its report waits for a decision."""

    KIND: ClassVar[str] = "gate.waiting"
    deployment_id: int
    gate: str
    gate_result_id: int
    report: dict[str, Any]
    report_hash: str
    release: str
    release_hash: str
    requested_by: str
    kind: str


@dataclass(frozen=True, kw_only=True)
class GateDecided(OutboxEvent):
    """Someone approved or rejected a gate, bound to the report and release they saw."""

    KIND: ClassVar[str] = "gate.decided"
    deployment_id: int
    gate: str
    decision: str
    reason: str | None
    gate_result_id: int
    report_hash: str
    release_hash: str
    release: str
    status: str
    decided_by: str
    decided_at: dt.datetime
    slack_channel: str | None = None
    slack_ts: str | None = None


@dataclass(frozen=True, kw_only=True)
class LimitsAccepted(OutboxEvent):
    """A traffic report's proposed request limits were stored in its endpoint's settings."""

    KIND: ClassVar[str] = "limits.accepted"
    deployment_id: int
    gate_result_id: int
    report_hash: str
    previous: dict[str, Any]
    accepted: dict[str, Any]
    accepted_by: str
    accepted_at: dt.datetime


@dataclass(frozen=True, kw_only=True)
class GatePlot(OutboxEvent):
    """A gate report's plot to upload into the thread (its own event, so a failed upload is retried alone)."""

    KIND: ClassVar[str] = "gate.plot"
    deployment_id: int
    gate: str
    gate_result_id: int


@dataclass(frozen=True, kw_only=True)
class RolloutProgress(OutboxEvent):
    """What a rollout watch or readiness attempt saw, said in the thread."""

    KIND: ClassVar[str] = "rollout.progress"
    deployment_id: int
    message: str
    state: str | None = None


# ---------------------------------------------------------------------------- a channel's alerts


@dataclass(frozen=True, kw_only=True)
class ChannelNotice(OutboxEvent):
    """An alert for a channel: ``channel``, or the endpoint's when ``None``."""

    text: str
    channel: str | None = None


@dataclass(frozen=True, kw_only=True)
class ReadinessAlert(ChannelNotice):
    """The readiness probe opened an incident (not answering, or slow first tokens)."""

    KIND: ClassVar[str] = "readiness.alert"
    incident: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class ReadinessRecovered(ChannelNotice):
    """The readiness probe closed its incidents."""

    KIND: ClassVar[str] = "readiness.recovered"
    incidents: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class ReservationNotice(ChannelNotice):
    """Something the reservation watch saw about one reservation; ``details`` are what it measured."""

    reservation_id: str
    details: dict[str, Any] = field(default_factory=dict, metadata=SPREAD)


@dataclass(frozen=True, kw_only=True)
class ReservationAppeared(ReservationNotice):
    KIND: ClassVar[str] = "reservation.appeared"


@dataclass(frozen=True, kw_only=True)
class ReservationChanged(ReservationNotice):
    KIND: ClassVar[str] = "reservation.changed"


@dataclass(frozen=True, kw_only=True)
class ReservationGone(ReservationNotice):
    KIND: ClassVar[str] = "reservation.gone"


@dataclass(frozen=True, kw_only=True)
class ReservationMismatch(ReservationNotice):
    KIND: ClassVar[str] = "reservation.mismatch"


@dataclass(frozen=True, kw_only=True)
class ReservationAlert(ReservationNotice):
    """A reservation crossed an expiry threshold."""

    KIND: ClassVar[str] = "reservation.alert"


@dataclass(frozen=True, kw_only=True)
class ReservationEscalation(ReservationNotice):
    """A reservation ends with nothing tested to take over: the on-call group is paged."""

    KIND: ClassVar[str] = "reservation.escalation"


@dataclass(frozen=True, kw_only=True)
class EndpointIncidentNotice(ChannelNotice):
    """The reservation watch opened or closed an endpoint-level incident."""

    region: str
    incident: str


@dataclass(frozen=True, kw_only=True)
class ReservationWatchFailed(EndpointIncidentNotice):
    KIND: ClassVar[str] = "reservation.watch_failed"


@dataclass(frozen=True, kw_only=True)
class ReservationWatchRecovered(EndpointIncidentNotice):
    KIND: ClassVar[str] = "reservation.watch_recovered"


@dataclass(frozen=True, kw_only=True)
class ReservationMissing(EndpointIncidentNotice):
    KIND: ClassVar[str] = "reservation.missing"


@dataclass(frozen=True, kw_only=True)
class ReservationFound(EndpointIncidentNotice):
    KIND: ClassVar[str] = "reservation.found"


# ---------------------------------------------------------------------------- gates before exposure


@dataclass(frozen=True, kw_only=True)
class AdmissionChanged(ChannelNotice):
    """The route now lets a different audience reach Kimi K3 (in the deployment's thread, or the channel)."""

    KIND: ClassVar[str] = "admission.changed"
    admission: str
    reason: str
    actor: str


@dataclass(frozen=True, kw_only=True)
class RestoreStarted(ChannelNotice):
    """A deploy ended after apply: the previous release is being restored by another deployment."""

    KIND: ClassVar[str] = "restore.started"
    restore_id: int | None
    release: str | None


@dataclass(frozen=True, kw_only=True)
class AdmissionStuck(ChannelNotice):
    """A restore or rollback failed while users were closed out: a person must take over (pages)."""

    KIND: ClassVar[str] = "admission.stuck"
    incident: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class DrainStalled(ChannelNotice):
    """Requests still run at the drain deadline: a person chooses to wait longer or to abort and reopen."""

    KIND: ClassVar[str] = "drain.stalled"
    running: float | None
    waiting: float | None


@dataclass(frozen=True, kw_only=True)
class GateReminder(ChannelNotice):
    """A gate has waited half its allowed time: its approvers are reminded once."""

    KIND: ClassVar[str] = "gate.reminder"
    gate: str
    expires_at: dt.datetime


@dataclass(frozen=True, kw_only=True)
class RampSplit(OutboxEvent):
    """The ramp as it happens: one thread message, edited in place at each step, soak and end.

    ``sides`` are the backends of the route, the candidate first: ``{"name", "weight"`` (percent of ordinary
    traffic), ``"cohort"`` (the internal cohort goes there), and from the last soak window ``"ttft_p99_ms"``,
    ``"error_rate"``, ``"requests"}``. ``outcome`` is None while ramping, then ``live`` or the abort's reason.
    """

    KIND: ClassVar[str] = "ramp.split"
    deployment_id: int
    step: str
    sides: tuple[dict[str, Any], ...]
    next_step: str | None = None
    next_at: dt.datetime | None = None
    outcome: str | None = None


@dataclass(frozen=True, kw_only=True)
class RampPlot(OutboxEvent):
    """The ramp ended (live or aborted): the PNG of its weights and latencies, uploaded into the thread."""

    KIND: ClassVar[str] = "ramp.plot"
    deployment_id: int
    path: str
    sha256: str
    title: str


@dataclass(frozen=True, kw_only=True)
class ServiceRolledBack(ChannelNotice):
    """``/kimi rollback SERVICE``: one route change moved every user back to the side kept warm."""

    KIND: ClassVar[str] = "service.rolled_back"
    service: str
    to_side: str
    from_side: str
    release: str | None
    actor: str


# ---------------------------------------------------------------------------- after go-live (the metrics watch)


@dataclass(frozen=True, kw_only=True)
class WatchAlert(ChannelNotice):
    """The metrics watch opened an incident: a burn-rate alert or a direct page, with what the endpoint runs.

    ``severity`` is ``page`` (mentions the on-call group) or ``warn``; ``silenced`` is True when a person
    silenced this kind on the endpoint, so the incident is recorded but not posted. ``context`` holds the live
    release, the last deployment and what it changed; the chat adds Acknowledge, Silence and Roll back.
    """

    KIND: ClassVar[str] = "watch.alert"
    incident_id: int
    incident: str
    severity: str
    reason: str
    silenced: bool = False
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class WatchRecovered(ChannelNotice):
    """The metrics watch closed an incident: one message, in the alert's thread when it has one."""

    KIND: ClassVar[str] = "watch.recovered"
    incident_id: int
    incident: str
    silenced: bool = False


@dataclass(frozen=True, kw_only=True)
class IncidentHandled(ChannelNotice):
    """A person acknowledged or silenced an incident: the alert message says so in place."""

    KIND: ClassVar[str] = "incident.handled"
    incident_id: int
    action: str
    actor: str


@dataclass(frozen=True, kw_only=True)
class SloPlot(ChannelNotice):
    """``/kimi slo`` drew the last hours of an endpoint: the notifier uploads the PNG to ``channel``."""

    KIND: ClassVar[str] = "slo.plot"
    path: str
    sha256: str
    title: str


@dataclass(frozen=True, kw_only=True)
class DrillNotice(ChannelNotice):
    """An availability drill was asked for, approved, rejected or ended: one line in the endpoint's channel."""

    KIND: ClassVar[str] = "drill.notice"
    drill_id: int
    state: str


@dataclass(frozen=True, kw_only=True)
class FailoverNotice(ChannelNotice):
    """Users moved to the fallback because Kimi K3 stopped answering, or back: said in the incident's thread."""

    KIND: ClassVar[str] = "failover.notice"
    incident_id: int | None = None  # the incident that moved them (its alert's thread), when it is known


EVENT_CLASSES: tuple[type[OutboxEvent], ...] = (
    DeploymentRequested, StateChanged, GateWaiting, GateDecided, LimitsAccepted, GatePlot, RolloutProgress,
    ReadinessAlert, ReadinessRecovered, DrillNotice,
    ReservationAppeared, ReservationChanged, ReservationGone, ReservationMismatch, ReservationAlert, ReservationEscalation,
    ReservationWatchFailed, ReservationWatchRecovered, ReservationMissing, ReservationFound,
    AdmissionChanged, RestoreStarted, AdmissionStuck, DrainStalled, GateReminder, ServiceRolledBack, RampSplit, RampPlot,
    WatchAlert, WatchRecovered, IncidentHandled, SloPlot, FailoverNotice,
)
"""Every event that may be stored, one per ``KIND``."""

BY_KIND: dict[str, type[OutboxEvent]] = {cls.KIND: cls for cls in EVENT_CLASSES}
