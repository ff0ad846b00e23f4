"""Traffic mixes and capacity reviews (migration 0018): lengths and shares of production's requests, never text."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from bot.adapters.store.models.base import Base


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
