"""The metrics watch's samples (``metric_samples``) and raw cursors (``metric_cursors``), kept bounded.

Each run adds one row per live endpoint; :meth:`SampleRepository.thin` then keeps minute rows for the
recent hours the short alert windows need, one row per hour before that, and nothing older than the
longest window any endpoint's budget needs. Three statements for every endpoint at once, so the cost per
run does not grow with a per-endpoint loop.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from bot.adapters.store.models import MetricCursor, MetricSample

MINUTE_STEP = 60
HOUR_STEP = 3600


def hour_of(at: dt.datetime) -> int:
    return int(at.timestamp() // 3600)


class SampleRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, sample: MetricSample) -> MetricSample:
        sample.hour = hour_of(sample.at)
        self.session.add(sample)  # flushed with the transaction (or by the next query): no id is needed now
        return sample

    def latest(self, endpoint_id: int) -> MetricSample | None:
        return self.session.scalar(select(MetricSample).where(MetricSample.endpoint_id == endpoint_id)
                                   .order_by(MetricSample.at.desc(), MetricSample.id.desc()).limit(1))

    def since(self, endpoint_id: int, start: dt.datetime) -> Sequence[MetricSample]:
        """Rows from the last one at or before ``start`` on, oldest first (a window needs its starting row)."""
        first = self.session.scalar(select(func.max(MetricSample.at))
                                    .where(MetricSample.endpoint_id == endpoint_id, MetricSample.at <= start))
        lower = first if first is not None else start
        return self.session.scalars(select(MetricSample)
                                    .where(MetricSample.endpoint_id == endpoint_id, MetricSample.at >= lower)
                                    .order_by(MetricSample.at, MetricSample.id)).all()

    def window_rows(self, endpoint_id: int, start: dt.datetime) -> Sequence[Any]:
        """Like :meth:`since`, as plain rows of the columns (``at``, the counts, the gauges): no ORM objects to build."""
        first = self.session.scalar(select(func.max(MetricSample.at))
                                    .where(MetricSample.endpoint_id == endpoint_id, MetricSample.at <= start))
        lower = first if first is not None else start
        columns = [c for c in MetricSample.__table__.columns if c.name not in ("id", "endpoint_id", "hour", "step")]
        return self.session.execute(select(*columns)
                                    .where(MetricSample.endpoint_id == endpoint_id, MetricSample.at >= lower)
                                    .order_by(MetricSample.at, MetricSample.id)).all()

    def thin(self, now: dt.datetime, *, minutes_kept: dt.timedelta, retention: dt.timedelta) -> int:
        """Keep the first minute row of each hour older than ``minutes_kept``, drop the rest and all past ``retention``."""
        cutoff = now - minutes_kept
        old_minutes = (MetricSample.step == MINUTE_STEP) & (MetricSample.at < cutoff)
        keep = (select(func.min(MetricSample.id)).where(old_minutes)
                .group_by(MetricSample.endpoint_id, MetricSample.hour))
        self.session.execute(update(MetricSample).where(old_minutes, MetricSample.id.in_(keep))
                             .values(step=HOUR_STEP).execution_options(synchronize_session=False))
        dropped = self.session.execute(delete(MetricSample).where(old_minutes)
                                       .execution_options(synchronize_session=False))
        expired = self.session.execute(delete(MetricSample).where(MetricSample.at < now - retention)
                                       .execution_options(synchronize_session=False))
        return int(getattr(dropped, "rowcount", 0) or 0) + int(getattr(expired, "rowcount", 0) or 0)

    def count(self, endpoint_id: int | None = None) -> int:
        query = select(func.count()).select_from(MetricSample)
        if endpoint_id is not None:
            query = query.where(MetricSample.endpoint_id == endpoint_id)
        return int(self.session.scalar(query) or 0)

    def cursor(self, endpoint_id: int) -> MetricCursor | None:
        return self.session.get(MetricCursor, endpoint_id)

    def set_cursor(self, endpoint_id: int, at: dt.datetime, raw: dict[str, Any]) -> None:
        row = self.session.get(MetricCursor, endpoint_id)
        if row is None:
            self.session.add(MetricCursor(endpoint_id=endpoint_id, at=at, raw=raw))
        else:
            row.at, row.raw = at, raw
        self.session.flush()
