"""A channel's alerts about an endpoint's readiness and its reserved capacity."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from bot.domain.events.base import SPREAD, ChannelNotice


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
