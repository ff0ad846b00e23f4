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

from sqlalchemy import ForeignKey, Index, Integer, String, select
from sqlalchemy.orm import Mapped, mapped_column

from bot.adapters.store.models import Base
from bot.adapters.store.repository import Repository


class TrafficMixRow(Base):
    __tablename__ = "traffic_mixes"

    id: Mapped[int] = mapped_column(primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("endpoints.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(String(16))
    at: Mapped[dt.datetime]
    mix: Mapped[dict[str, Any]] = mapped_column()  # {} until a reading saw requests
    # The metrics row's cumulative histograms and counters when counting began (the watch's first reading of
    # this server, after any sweep): the live mix is what the server served since, never the sweep itself.
    baseline: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    sha256: Mapped[str | None] = mapped_column(String(64), default=None)
    registered_by: Mapped[str | None] = mapped_column(String(128), default=None)

    __table_args__ = (Index("ix_traffic_mixes_endpoint_id_source_id", "endpoint_id", "source", "id"),)


class CapacityReview(Base):
    __tablename__ = "capacity_reviews"

    id: Mapped[int] = mapped_column(primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("endpoints.id", ondelete="CASCADE"))
    at: Mapped[dt.datetime]
    kind: Mapped[str] = mapped_column(String(16))  # traffic-gate | on-demand
    actor: Mapped[str] = mapped_column(String(128))
    deployment_id: Mapped[int | None] = mapped_column(Integer, default=None)
    release: Mapped[str | None] = mapped_column(String(128), default=None)
    max_model_len: Mapped[int] = mapped_column(Integer)
    knee: Mapped[int | None] = mapped_column(Integer, default=None)
    workload: Mapped[dict[str, Any]] = mapped_column()
    production_mix: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    proposal: Mapped[dict[str, Any]] = mapped_column()

    __table_args__ = (Index("ix_capacity_reviews_endpoint_id_id", "endpoint_id", "id"),)


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
