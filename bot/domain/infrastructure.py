"""The infrastructure gate's reservation checks: the guide's three preflight questions.

1. Does the reservation's instance type exactly match the path (``ml.`` prefix on HyperPod)?
2. Does the reservation's Availability Zone match the cluster's nodes?
3. Does the window cover warm-up, load testing, the production window and cleanup?
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from bot.domain.checks import Check
from bot.domain.reservations import ReservationInfo, same_instance_type

# Which endpoint kind each reservation kind carries: HyperPod a training plan, EKS a Capacity Block.
ENDPOINT_KIND_OF = {"training-plan": "hyperpod", "capacity-block": "eks"}
CLEANUP = dt.timedelta(minutes=30)
"""Kept free at the end of a window: a training plan starts terminating instances 30 minutes before its end."""


def select_reservation(
    reservations: Iterable[ReservationInfo],
    *,
    reservation_id: str | None,
    instance_type: str,
    availability_zone: str | None,
    kind: str,
) -> ReservationInfo | None:
    """The endpoint's reservation: the one it names, else the latest-ending active match."""
    candidates = list(reservations)
    if reservation_id:
        return next((r for r in candidates if r.id == reservation_id), None)
    matching = [
        r
        for r in candidates
        if r.kind == kind
        and r.unusable_for(ENDPOINT_KIND_OF.get(kind, "")) is None
        and same_instance_type(r.instance_type, instance_type)
        and (availability_zone is None or r.availability_zone == availability_zone)
        and r.state.lower() in {"active", "scheduled", "payment-pending", "pending"}
    ]
    return max(matching, key=lambda r: r.end or dt.datetime.min.replace(tzinfo=dt.UTC), default=None)


def reservation_checks(
    reservation: ReservationInfo | None,
    *,
    endpoint_kind: str,
    instance_type: str,
    availability_zone: str | None,
    node_zones: Iterable[str],
    now: dt.datetime,
    warmup: dt.timedelta,
    soak: dt.timedelta,
    rollout_window: dt.timedelta,
) -> list[Check]:
    """The three preflight answers as named checks."""
    if reservation is None:
        return [Check.failed("reservation", "no reservation found for this endpoint; reserve capacity before deploying")]
    wanted = f"ml.{instance_type.removeprefix('ml.')}" if endpoint_kind == "hyperpod" else instance_type.removeprefix("ml.")
    checks: list[Check] = []
    exact = reservation.instance_type == wanted or (
        endpoint_kind == "hyperpod"
        and reservation.kind == "training-plan"
        and same_instance_type(reservation.instance_type, wanted)
    )
    if exact:
        checks.append(Check.passed("reservation.instance_type", f"{reservation.instance_type} matches the {endpoint_kind} path"))
    else:
        checks.append(
            Check.failed(
                "reservation.instance_type",
                f"reservation is {reservation.instance_type}, the {endpoint_kind} path needs {wanted}",
            )
        )
    unusable = reservation.unusable_for(endpoint_kind)
    if unusable:
        # Only said when it fails: a report of usable capacity keeps its three answers.
        checks.append(Check.failed("reservation.target", f"{unusable}; reserve capacity for this path"))
    zones = sorted(set(node_zones))
    expected_zone = availability_zone or (zones[0] if len(zones) == 1 else None)
    if reservation.availability_zone is None:
        checks.append(Check.warned("reservation.zone", "the reservation reports no Availability Zone; confirm it by hand"))
    elif expected_zone is None:
        checks.append(
            Check.warned("reservation.zone", f"reservation is in {reservation.availability_zone}; the endpoint names no zone")
        )
    elif reservation.availability_zone == expected_zone and (not zones or reservation.availability_zone in zones):
        checks.append(Check.passed("reservation.zone", f"reservation and GPU nodes are in {reservation.availability_zone}"))
    else:
        where = ", ".join(zones) or expected_zone
        checks.append(
            Check.failed(
                "reservation.zone",
                f"reservation is in {reservation.availability_zone} but the cluster's GPU nodes are in {where}",
            )
        )
    needed_until = now + warmup + soak + rollout_window + CLEANUP
    if reservation.state.lower() not in {"active", "scheduled"}:
        checks.append(Check.failed("reservation.window", f"reservation is {reservation.state}, not active"))
    elif reservation.start is not None and reservation.start > now:
        checks.append(
            Check.failed(
                "reservation.window", f"reservation starts {reservation.start:%Y-%m-%d %H:%M} UTC, after now; wait for it"
            )
        )
    elif reservation.end is None or reservation.end < needed_until:
        short = (needed_until - reservation.end) if reservation.end else None
        checks.append(
            Check.failed(
                "reservation.window",
                f"reservation ends {reservation.end:%Y-%m-%d %H:%M} UTC, "
                f"{_fmt(short)} before warm-up, soak, rollout and cleanup finish"
                if reservation.end
                else "reservation has no end date",
            )
        )
    else:
        spare = reservation.end - needed_until
        checks.append(
            Check.passed("reservation.window", f"covers warm-up, soak, rollout and cleanup with {_fmt(spare)} to spare")
        )
    return checks


def _fmt(delta: dt.timedelta | None) -> str:
    if delta is None:
        return "?"
    hours = delta.total_seconds() / 3600
    return f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} h"
