"""What the reservation watch's tests share (``tests/services/test_reservation_*.py``): a scripted reservation source
per test (``source``), a context that reads it (``new_ctx``), and the events and alerts the watch leaves.
"""

from __future__ import annotations

import datetime as dt

import pytest

from bot.services.context import Ports
from tests.jobs_support import (
    ScriptedReservations,
    eks_endpoint,
)

H = dt.timedelta(hours=1)
D = dt.timedelta(days=1)


def events(ctx, prefix: str = "reservation.") -> list[tuple[str, dict]]:
    with ctx.uow() as uow:
        return [(e.kind, dict(e.payload)) for e in uow.events.undelivered(limit=10_000) if e.kind.startswith(prefix)]


def alerts(ctx) -> list[tuple[str, float]]:
    return [(kind, p["threshold_hours"]) for kind, p in events(ctx) if kind in {"reservation.alert", "reservation.escalation"}
            and "threshold_hours" in p]


@pytest.fixture()
def source() -> ScriptedReservations:
    return ScriptedReservations()


@pytest.fixture()
def new_ctx(make_ctx, source):
    """A fresh process on the same database: new Context, same settings, same AWS."""
    def factory(**overrides: object):
        overrides.setdefault("endpoints", [eks_endpoint("kimi-prod")])
        overrides.setdefault("oncall_group", "S0ONCALL")
        ctx = make_ctx(**overrides, ports=Ports(reservations=source))
        return ctx
    return factory
