"""What the watches and drills keep: reservations, readiness checks, incidents, metric samples, drills."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from bot.adapters.store.models.base import Base
from bot.adapters.store.models.deployments import Endpoint


class Reservation(Base):
    """Reserved capacity as last seen in AWS (Capacity Block or training plan)."""

    __tablename__ = "reservations"

    id: Mapped[str] = mapped_column(String(256), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    region: Mapped[str] = mapped_column(String(32))
    instance_type: Mapped[str] = mapped_column(String(64))
    availability_zone: Mapped[str | None] = mapped_column(String(32))
    instance_count: Mapped[int] = mapped_column(Integer, default=1)
    start_at: Mapped[dt.datetime | None]
    end_at: Mapped[dt.datetime | None]
    state: Mapped[str] = mapped_column(String(32))
    endpoint_name: Mapped[str | None] = mapped_column(String(63))
    alerts_sent: Mapped[list[Any]] = mapped_column(default=list)
    first_seen_at: Mapped[dt.datetime]
    last_seen_at: Mapped[dt.datetime]
    gone_at: Mapped[dt.datetime | None]

    __table_args__ = (CheckConstraint("kind IN ('capacity-block', 'training-plan')", name="kind"),)


class ReadinessCheck(Base):
    """One readiness completion against an endpoint: timings and outcome, never the text."""

    __tablename__ = "readiness_checks"

    id: Mapped[int] = mapped_column(primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("endpoints.id"), index=True)
    at: Mapped[dt.datetime]
    ok: Mapped[bool] = mapped_column(Boolean)
    http_status: Mapped[int | None] = mapped_column(Integer)
    ttft_ms: Mapped[float | None] = mapped_column(Float)
    total_ms: Mapped[float | None] = mapped_column(Float)
    failure_kind: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)

    # An endpoint's newest probes, read in order from the index instead of sorting all of them.
    __table_args__ = (Index("ix_readiness_checks_endpoint_id_at_id", "endpoint_id", "at", "id"),)


class Incident(Base):
    """An open alert for an endpoint; at most one open incident per endpoint and kind."""

    __tablename__ = "incidents"

    id: Mapped[int] = mapped_column(primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("endpoints.id"))
    kind: Mapped[str] = mapped_column(String(32))
    open: Mapped[bool | None] = mapped_column(Boolean, default=True)
    reason: Mapped[str] = mapped_column(Text)
    opened_at: Mapped[dt.datetime]
    closed_at: Mapped[dt.datetime | None]
    # The metrics watch's incidents (migration 0011): how loud, who took it, and a silence on its kind.
    severity: Mapped[str | None] = mapped_column(String(8), default=None)
    acknowledged_by: Mapped[str | None] = mapped_column(String(128), default=None)
    acknowledged_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    silenced_until: Mapped[dt.datetime | None] = mapped_column(default=None)
    silenced_by: Mapped[str | None] = mapped_column(String(128), default=None)
    silence_reason: Mapped[str | None] = mapped_column(Text, default=None)
    slack_channel: Mapped[str | None] = mapped_column(String(64), default=None)
    slack_ts: Mapped[str | None] = mapped_column(String(64), default=None)
    # Alertmanager's fingerprint of the alert this incident was opened for (migration 0017); NULL: the built-in watch.
    fingerprint: Mapped[str | None] = mapped_column(String(64), default=None)

    __table_args__ = (UniqueConstraint("endpoint_id", "kind", "open"),)


class MetricSample(Base):
    """One reading of a live endpoint by the metrics watch (see :mod:`bot.adapters.store.samples`).

    The event columns are cumulative and never fall (a restarted server's counters are added from zero), so
    any window is the difference of two rows and older rows are thinned to one an hour (``step``) without
    losing a request; the gauges are the reading's own.
    """

    __tablename__ = "metric_samples"

    id: Mapped[int] = mapped_column(primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("endpoints.id", ondelete="CASCADE"))
    at: Mapped[dt.datetime]
    hour: Mapped[int] = mapped_column(Integer)  # whole hours since the epoch: thinning keeps one row per hour
    step: Mapped[int] = mapped_column(Integer, default=60)  # 60: a minute's reading; 3600: kept for its hour
    requests: Mapped[float] = mapped_column(Float, default=0.0)
    errors: Mapped[float] = mapped_column(Float, default=0.0)
    rejects: Mapped[float] = mapped_column(Float, default=0.0)
    ttft_events: Mapped[float] = mapped_column(Float, default=0.0)
    ttft_bad: Mapped[float] = mapped_column(Float, default=0.0)
    queue_events: Mapped[float] = mapped_column(Float, default=0.0)
    queue_bad: Mapped[float] = mapped_column(Float, default=0.0)
    e2e_events: Mapped[float] = mapped_column(Float, default=0.0)
    e2e_bad: Mapped[float] = mapped_column(Float, default=0.0)
    waiting: Mapped[float | None] = mapped_column(Float)
    kv_cache_usage: Mapped[float | None] = mapped_column(Float)
    gpu_utilisation: Mapped[float | None] = mapped_column(Float)
    gpu_memory: Mapped[float | None] = mapped_column(Float)
    gpu_power: Mapped[float | None] = mapped_column(Float)

    __table_args__ = (Index("ix_metric_samples_endpoint_at", "endpoint_id", "at"),)


class MetricCursor(Base):
    """The watch's last raw reading of an endpoint: counters as the server showed them, to take the next delta."""

    __tablename__ = "metric_cursors"

    endpoint_id: Mapped[int] = mapped_column(ForeignKey("endpoints.id", ondelete="CASCADE"), primary_key=True)
    at: Mapped[dt.datetime]
    raw: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Drill(Base):
    """An availability drill on one endpoint (migration 0013): asked, approved by someone else, run, judged.

    ``active`` is true while the drill waits for its approver or runs and NULL afterwards: the unique
    ``(endpoint_id, active)`` lets one drill at a time hold an endpoint, as ``deployments.in_flight`` does.
    """

    __tablename__ = "drills"

    id: Mapped[int] = mapped_column(primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("endpoints.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16))
    active: Mapped[bool | None] = mapped_column(Boolean, default=True)
    requested_by: Mapped[str] = mapped_column(String(128))
    requested_at: Mapped[dt.datetime]
    accept_user_impact: Mapped[bool] = mapped_column(Boolean, default=False)
    decided_by: Mapped[str | None] = mapped_column(String(128), default=None)
    decided_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    started_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    detected_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    lifted_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    recovered_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    ended_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    alerts: Mapped[list[Any]] = mapped_column(default=list)
    passed: Mapped[bool | None] = mapped_column(Boolean, default=None)
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)

    endpoint: Mapped[Endpoint] = relationship(lazy="joined")

    __table_args__ = (
        CheckConstraint("state IN ('waiting', 'running', 'passed', 'failed', 'rejected')", name="state"),
        UniqueConstraint("endpoint_id", "active"),
        Index("ix_drills_endpoint_id_id", "endpoint_id", "id"),
    )
