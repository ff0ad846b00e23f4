"""The drills people read, and the infrastructure gate's note on an endpoint's last drill."""

from __future__ import annotations

import datetime as dt

from bot.domain import drills as rules
from bot.domain.drills import DrillView
from bot.services.access import Identity, authorize
from bot.services.context import Context
from bot.services.drills.records import endpoint_row, view_of


def list_drills(ctx: Context, actor: Identity, endpoint: str, limit: int = 10) -> list[DrillView]:
    """The endpoint's last drills, newest first."""
    authorize(ctx, actor, "view", f"endpoint:{endpoint}")
    with ctx.uow() as uow:
        row = endpoint_row(uow, endpoint)
        return [view_of(d) for d in uow.drills.for_endpoint(row.id, limit)]


def drill_check_reason(ctx: Context, endpoint: str) -> str | None:
    """Why the infrastructure gate warns about the endpoint's drills (None: one passed within the period)."""
    with ctx.uow() as uow:
        row = uow.endpoints.get(endpoint)
        last = uow.drills.last_passed(row.id) if row is not None else None
        ended = last.ended_at if last is not None else None
    return rules.stale_drills(ended, ctx.clock.now(), dt.timedelta(days=ctx.settings.drill_period_days))
