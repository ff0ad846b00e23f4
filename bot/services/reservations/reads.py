"""The stored reservations as people read them, and the one an endpoint deploys onto."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from bot.adapters.store.models import Reservation
from bot.config import EndpointSettings
from bot.domain.expiry import (
    expected_kind,
    names_reservation,
)
from bot.domain.infrastructure import select_reservation
from bot.domain.reservations import ReservationInfo
from bot.services.context import Context, require
from bot.services.errors import NotFound
from bot.services.reservations.rows import info_of, thresholds_sent


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


def _view(row: Reservation, now: dt.datetime) -> ReservationView:
    info = info_of(row)
    return ReservationView(
        **vars(info), endpoint=row.endpoint_name, left=info.remaining(now),
        alerts_sent_hours=sorted(thresholds_sent(row), reverse=True), first_seen_at=row.first_seen_at,
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
            candidates = [info_of(row) for row in uow.reservations.list() if row.region == endpoint.region]
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
