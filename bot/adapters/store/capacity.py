"""Traffic mixes and capacity reviews (migration 0018): what production sends, and what was last measured for it.

``traffic_mixes`` keeps one row per endpoint read from vLLM's request histograms (``source`` ``metrics``,
updated in place by the metrics watch) and one row per registered redacted trace (``source`` ``trace``, with
the SHA-256 of its bytes). ``capacity_reviews`` keeps every traffic gate sweep and on-demand capacity sweep:
the mix it replayed, production's mix beside it, the knee, the proposal and the context length it measured.
Neither holds a request's text: a mix is lengths and shares only (:class:`bot.domain.traffic_mix.TrafficMix`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from bot.adapters.store.models import CapacityReview, TrafficMixRow
from bot.adapters.store.repository import Repository


class CapacityRepository(Repository):
    def live_mix(self, endpoint_id: int) -> TrafficMixRow | None:
        return self.session.scalar(select(TrafficMixRow).where(TrafficMixRow.endpoint_id == endpoint_id,
                                                                TrafficMixRow.source == "metrics")
                                   .order_by(TrafficMixRow.id.desc()).limit(1))

    def set_live_mix(self, endpoint_id: int, at: dt.datetime, mix: dict[str, Any],
                     baseline: dict[str, Any]) -> TrafficMixRow:
        row = self.live_mix(endpoint_id)
        if row is None:
            return self._add(TrafficMixRow(endpoint_id=endpoint_id, source="metrics", at=at, mix=mix, baseline=baseline))
        row.at, row.mix, row.baseline = at, mix, baseline
        return row

    def add_trace(self, endpoint_id: int, at: dt.datetime, mix: dict[str, Any], sha256: str, actor: str) -> TrafficMixRow:
        return self._add(TrafficMixRow(endpoint_id=endpoint_id, source="trace", at=at, mix=mix, sha256=sha256,
                                       registered_by=actor))

    def trace(self, endpoint_id: int) -> TrafficMixRow | None:
        return self.session.scalar(select(TrafficMixRow).where(TrafficMixRow.endpoint_id == endpoint_id,
                                                                TrafficMixRow.source == "trace")
                                   .order_by(TrafficMixRow.id.desc()).limit(1))

    def add_review(self, review: CapacityReview) -> CapacityReview:
        return self._add(review)

    def last_review(self, endpoint_id: int) -> CapacityReview | None:
        return self.session.scalar(select(CapacityReview).where(CapacityReview.endpoint_id == endpoint_id)
                                   .order_by(CapacityReview.id.desc()).limit(1))

    def reviews(self, endpoint_id: int, limit: int = 10) -> Sequence[CapacityReview]:
        return self.session.scalars(select(CapacityReview).where(CapacityReview.endpoint_id == endpoint_id)
                                    .order_by(CapacityReview.id.desc()).limit(limit)).all()
