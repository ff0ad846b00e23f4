"""Governance records: licence reviews and security exceptions."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from bot.adapters.store.models.base import Base


class LicenceReviewRecord(Base):
    """A licence review for one endpoint's exposure and one licence version (see :mod:`bot.domain.governance`).

    Append-only: a new review supersedes an older one; the artifact gate reads the newest for the
    endpoint and the release's licence version.
    """

    __tablename__ = "licence_reviews"

    id: Mapped[int] = mapped_column(primary_key=True)
    endpoint: Mapped[str] = mapped_column(String(63), index=True)
    licence_version: Mapped[str] = mapped_column(String(128))
    reviewer: Mapped[str] = mapped_column(String(128))
    reviewed_at: Mapped[dt.datetime]
    classification: Mapped[str] = mapped_column(String(16))
    third_party_exposure: Mapped[bool] = mapped_column(Boolean)
    maas_revenue_over_threshold: Mapped[bool] = mapped_column(Boolean)
    separate_agreement: Mapped[str | None] = mapped_column(String(256))
    attribution: Mapped[str] = mapped_column(String(1024))
    expires_at: Mapped[dt.datetime]

    __table_args__ = (
        CheckConstraint("classification IN ('internal', 'third-party', 'maas')", name="classification"),
    )


class SecurityExceptionRecord(Base):
    """A reviewed exception to a security rule for one release or endpoint, until it expires."""

    __tablename__ = "security_exceptions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    scope: Mapped[str] = mapped_column(String(16))
    target: Mapped[str] = mapped_column(String(128))
    reviewer: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[dt.datetime]
    recorded_at: Mapped[dt.datetime]

    __table_args__ = (
        CheckConstraint(
            "kind IN ('trust-remote-code', 'unscanned-image', 'payload-capture', 'tensor-parallel', 'side-door')",
            name="kind",
        ),
        CheckConstraint("scope IN ('release', 'endpoint')", name="scope"),
    )
