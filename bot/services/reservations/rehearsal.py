"""The reservation-expiry drill: what the watch would say at an endpoint's last alert, on a moved clock."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from bot.domain.expiry import (
    USABLE_STATES,
    short_id,
)
from bot.services.context import Context
from bot.services.reservations.rows import WatchReport, markers_of, store_alerts
from bot.services.reservations.watch import Watch


@dataclass(frozen=True)
class ExpiryRehearsal:
    """What the watch would say at the endpoint's reservation's last alert, on a moved clock (nothing kept)."""

    reservation: str | None  # short id; None when the endpoint has no reservation the watch knows
    ends: dt.datetime | None = None
    alert_at: dt.datetime | None = None
    alert: str | None = None  # the notice it would send: reservation.escalation (a page) or reservation.alert
    takeover: str | None = None  # the tested endpoint that would take over, if any


def rehearse_expiry(ctx: Context, endpoint_name: str) -> ExpiryRehearsal:
    """Run the watch's thresholds at the endpoint's reservation's last alert, as if none had been sent; roll back.

    The clock is moved to one minute past the smallest threshold before the end of the endpoint's usable
    reservation that ends last; the stored reservations, the tested endpoints and the on-call settings are the
    real ones, so the answer is what the watch will do then unless something changes meanwhile.
    """
    from bot.adapters.clock import FrozenClock

    with ctx.uow() as uow:
        rows = [r for r in uow.reservations.list()
                if r.endpoint_name == endpoint_name and r.state in USABLE_STATES and r.end_at is not None]
        if not rows:
            return ExpiryRehearsal(None)
        row = max(rows, key=lambda r: r.end_at or dt.datetime.min.replace(tzinfo=dt.UTC))
        assert row.end_at is not None
        last = min(float(t) for t in ctx.settings.alert_thresholds_hours)
        at = row.end_at - dt.timedelta(hours=last) + dt.timedelta(minutes=1)
        for each in rows:
            store_alerts(each, set(), markers_of(each))  # as if nothing was announced yet (rolled back below)
        uow.flush()
        report = WatchReport()
        watch = Watch(replace(ctx, clock=FrozenClock(at)), uow, report)
        watch.thresholds()
        mine = short_id(row.id)
        alert = ("reservation.escalation" if any(e.startswith(f"{mine}@") for e in report.escalations)
                 else "reservation.alert" if any(e.startswith(f"{mine}@") for e in report.alerts) else None)
        takeover = watch.replacement(row, row.end_at)
        uow.rollback()  # a rehearsal: no alert sent, nothing stored
        return ExpiryRehearsal(mine, row.end_at, at, alert, takeover)
