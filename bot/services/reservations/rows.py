"""What the watch reads and keeps: AWS's reservations region by region, a run's report, and a stored row's
announced thresholds and warnings (``alerts_sent``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bot.adapters.aws.errors import aws_error_text
from bot.adapters.store.models import Reservation
from bot.domain.expiry import (
    names_reservation,
)
from bot.domain.reservations import ReservationInfo, same_instance_type
from bot.logs import logger_for
from bot.services.context import Context, require

log = logger_for(__name__)


ACTOR = "kimi-ops:reservation-watch"
DEFAULT_INSTANCE_TYPE = "p6-b300.48xlarge"
MISMATCH_PREFIX = "mismatch:"
WATCH_INCIDENT = "reservation-watch"
MISSING_INCIDENT = "no-reservation"


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


def info_of(row: Reservation) -> ReservationInfo:
    return ReservationInfo(
        id=row.id, kind=row.kind, region=row.region, instance_type=row.instance_type,  # type: ignore[arg-type]
        availability_zone=row.availability_zone, instance_count=row.instance_count,
        start=row.start_at, end=row.end_at, state=row.state,
    )


def thresholds_sent(row: Reservation) -> set[float]:
    return {float(x) for x in row.alerts_sent or [] if isinstance(x, (int, float))}


def markers_of(row: Reservation) -> set[str]:
    return {x for x in row.alerts_sent or [] if isinstance(x, str)}


def store_alerts(row: Reservation, thresholds: set[float], markers: set[str]) -> None:
    # A new list object so SQLAlchemy sees the JSON column change.
    row.alerts_sent = sorted(thresholds, reverse=True) + sorted(markers)


def watched_regions(ctx: Context) -> list[str]:
    regions = list(dict.fromkeys([*ctx.settings.aws_regions, *(e.region for e in ctx.settings.endpoints)]))
    return regions


def watched_instance_types(ctx: Context, region: str) -> list[str]:
    wanted = [e.instance_type.removeprefix("ml.") for e in ctx.settings.endpoints if e.region == region]
    return list(dict.fromkeys([*wanted, DEFAULT_INSTANCE_TYPE]))


def read_all(ctx: Context) -> tuple[dict[str, ReservationInfo], set[str], dict[str, str]]:
    """Ask AWS, region by region: ``(reservations by id, regions read, error by region)``; no transaction is open."""
    source = require(ctx.ports.reservations, "AWS access", "to read reservations; give this process AWS credentials and regions")
    seen: dict[str, ReservationInfo] = {}
    read: set[str] = set()
    errors: dict[str, str] = {}
    for region in watched_regions(ctx):
        types = watched_instance_types(ctx, region)
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
