"""Pure rules of the reservation watch: which endpoint a reservation serves, whether it fits, and when to alert.

Thresholds are hours before a reservation's end. Each fires once per
reservation: :func:`threshold_to_announce` names the one to alert for (the
smallest newly crossed, so a bot that was down sends one alert, not a burst)
and the set to remember as sent; :func:`rearm` forgets, after an extension,
the thresholds that are no longer crossed. HyperPod consumes a flexible
training plan, EKS an EC2 Capacity Block.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from bot.domain.reservations import ReservationInfo, same_instance_type


class CapacityNeed(Protocol):
    """What an endpoint needs of a reservation; the settings' ``EndpointSettings`` is one (the domain reads no settings)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def region(self) -> str: ...
    @property
    def instance_type(self) -> str: ...
    @property
    def availability_zone(self) -> str | None: ...
    @property
    def reservation_id(self) -> str | None: ...


Need = TypeVar("Need", bound=CapacityNeed)

# States in which a reservation holds, or will hold, capacity.
USABLE_STATES = frozenset({"active", "scheduled", "pending", "payment-pending", "assessing", "delayed"})


def expected_kind(endpoint: CapacityNeed) -> str:
    """HyperPod consumes a flexible training plan; EKS targets an EC2 Capacity Block."""
    return "training-plan" if endpoint.kind == "hyperpod" else "capacity-block"


def names_reservation(reservation_id: str, wanted: str) -> bool:
    """An endpoint may name a training plan by ARN or by name, a Capacity Block by its ``cr-`` id."""
    return wanted in {reservation_id, reservation_id.rsplit("/", 1)[-1]}


def fits(info: ReservationInfo, endpoint: CapacityNeed) -> bool:
    """Would this reservation serve the endpoint: region, kind, what AWS lets it be used by, instance type and zone."""
    return (
        info.region == endpoint.region
        and info.kind == expected_kind(endpoint)
        and same_instance_type(info.instance_type, endpoint.instance_type)
        and (endpoint.availability_zone is None or info.availability_zone == endpoint.availability_zone)
        and info.unusable_for(endpoint.kind) is None
    )


def match_endpoint(info: ReservationInfo, endpoints: Sequence[Need]) -> Need | None:
    """The endpoint naming this reservation, else the first (by name) it fits without naming one."""
    for endpoint in endpoints:
        if endpoint.reservation_id and names_reservation(info.id, endpoint.reservation_id):
            return endpoint
    for endpoint in sorted(endpoints, key=lambda e: e.name):
        if not endpoint.reservation_id and fits(info, endpoint):
            return endpoint
    return None


def mismatches(info: ReservationInfo, endpoint: CapacityNeed) -> list[str]:
    """Ways the reservation does not fit its endpoint, each a short phrase."""
    problems: list[str] = []
    if info.kind != expected_kind(endpoint):
        problems.append(f"it is a {info.kind} but a {endpoint.kind} endpoint needs a {expected_kind(endpoint)}")
    else:
        unusable = info.unusable_for(endpoint.kind)
        if unusable:
            problems.append(unusable)
    if not same_instance_type(info.instance_type, endpoint.instance_type):
        problems.append(f"instance type {info.instance_type} is not the endpoint's {endpoint.instance_type}")
    if info.region != endpoint.region:
        problems.append(f"region {info.region} is not the endpoint's {endpoint.region}")
    if info.availability_zone and endpoint.availability_zone and info.availability_zone != endpoint.availability_zone:
        problems.append(f"zone {info.availability_zone} is not the endpoint's {endpoint.availability_zone}")
    return problems


def crossed_thresholds(remaining: dt.timedelta, thresholds: Iterable[float]) -> set[float]:
    hours = remaining.total_seconds() / 3600
    return {float(t) for t in thresholds if hours <= float(t)}


def threshold_to_announce(
    remaining: dt.timedelta, thresholds: Iterable[float], sent: set[float]
) -> tuple[float | None, set[float]]:
    """``(threshold to alert for, thresholds sent afterwards)``: one alert for the smallest newly crossed."""
    crossed = crossed_thresholds(remaining, thresholds)
    new = crossed - sent
    return (min(new) if new else None), sent | crossed


def rearm(remaining: dt.timedelta, sent: set[float]) -> set[float]:
    """After an extension, keep only the thresholds that are still crossed."""
    hours = remaining.total_seconds() / 3600
    return {t for t in sent if hours <= t}


def format_remaining(delta: dt.timedelta | None) -> str:
    if delta is None:
        return "no end date"
    seconds = delta.total_seconds()
    if seconds <= 0:
        return "ended"
    hours = seconds / 3600
    if hours >= 48:
        return f"{hours / 24:.1f} days"
    if hours >= 1:
        return f"{hours:.1f} h"
    return f"{seconds / 60:.0f} min"


def fmt_hours(hours: float) -> str:
    return f"{hours / 24:g} days" if hours >= 48 and hours % 24 == 0 else f"{hours:g} h"


def when(at: dt.datetime | None) -> str:
    return "no end date" if at is None else f"{at:%Y-%m-%d %H:%M} UTC"


def describe(info: ReservationInfo) -> str:
    zone = info.availability_zone or "no zone"
    return f"{info.kind} `{info.id.rsplit('/', 1)[-1]}` ({info.instance_count} × {info.instance_type}, {info.region}/{zone})"


def short_id(reservation_id: str) -> str:
    return reservation_id.rsplit("/", 1)[-1]
