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

from bot.domain.events.base import SPREAD, ChannelNotice, OutboxEvent, key_field
from bot.domain.events.channel import (
    EndpointIncidentNotice,
    ReadinessAlert,
    ReadinessRecovered,
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
from bot.domain.events.exposure import (
    AdmissionChanged,
    AdmissionStuck,
    DrainStalled,
    GateReminder,
    RampPlot,
    RampSplit,
    RestoreStarted,
    ServiceRolledBack,
)
from bot.domain.events.thread import (
    DeploymentRequested,
    GateDecided,
    GatePlot,
    GateWaiting,
    LimitsAccepted,
    RolloutProgress,
    StateChanged,
)
from bot.domain.events.watch import (
    DrillNotice,
    FailoverNotice,
    IncidentHandled,
    RulesNotApplied,
    SloPlot,
    WatchAlert,
    WatchRecovered,
)

EVENT_CLASSES: tuple[type[OutboxEvent], ...] = (
    DeploymentRequested, StateChanged, GateWaiting, GateDecided, LimitsAccepted, GatePlot, RolloutProgress,
    ReadinessAlert, ReadinessRecovered, DrillNotice,
    ReservationAppeared, ReservationChanged, ReservationGone, ReservationMismatch, ReservationAlert, ReservationEscalation,
    ReservationWatchFailed, ReservationWatchRecovered, ReservationMissing, ReservationFound,
    AdmissionChanged, RestoreStarted, AdmissionStuck, DrainStalled, GateReminder, ServiceRolledBack, RampSplit, RampPlot,
    WatchAlert, WatchRecovered, IncidentHandled, SloPlot, FailoverNotice, RulesNotApplied,
)
"""Every event that may be stored, one per ``KIND``."""

BY_KIND: dict[str, type[OutboxEvent]] = {cls.KIND: cls for cls in EVENT_CLASSES}

__all__ = [
    "BY_KIND",
    "EVENT_CLASSES",
    "SPREAD",
    "AdmissionChanged",
    "AdmissionStuck",
    "ChannelNotice",
    "DeploymentRequested",
    "DrainStalled",
    "DrillNotice",
    "EndpointIncidentNotice",
    "FailoverNotice",
    "GateDecided",
    "GatePlot",
    "GateReminder",
    "GateWaiting",
    "IncidentHandled",
    "LimitsAccepted",
    "OutboxEvent",
    "RampPlot",
    "RampSplit",
    "ReadinessAlert",
    "ReadinessRecovered",
    "ReservationAlert",
    "ReservationAppeared",
    "ReservationChanged",
    "ReservationEscalation",
    "ReservationFound",
    "ReservationGone",
    "ReservationMismatch",
    "ReservationMissing",
    "ReservationNotice",
    "ReservationWatchFailed",
    "ReservationWatchRecovered",
    "RestoreStarted",
    "RolloutProgress",
    "RulesNotApplied",
    "ServiceRolledBack",
    "SloPlot",
    "StateChanged",
    "WatchAlert",
    "WatchRecovered",
    "key_field",
]
