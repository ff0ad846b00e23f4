"""The licence reviews and security exceptions the artifact gate reads, as domain records.

Both tables are append-only from kimi-ops's side: a new review supersedes an
older one, an exception ends at its expiry. The rows come back as the plain
:mod:`bot.domain.governance` records the pure rules take.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.adapters.store.models import LicenceReviewRecord, SecurityExceptionRecord
from bot.domain.governance import LicenceReview, SecurityException


def _review(row: LicenceReviewRecord) -> LicenceReview:
    return LicenceReview(
        id=row.id, endpoint=row.endpoint, licence_version=row.licence_version, reviewer=row.reviewer,
        reviewed_at=row.reviewed_at, classification=row.classification, third_party_exposure=row.third_party_exposure,
        maas_revenue_over_threshold=row.maas_revenue_over_threshold, separate_agreement=row.separate_agreement,
        attribution=row.attribution, expires_at=row.expires_at,
    )


def _exception(row: SecurityExceptionRecord) -> SecurityException:
    return SecurityException(
        id=row.id, kind=row.kind, scope=row.scope, target=row.target, reviewer=row.reviewer, reason=row.reason,
        expires_at=row.expires_at, recorded_at=row.recorded_at,
    )


class GovernanceRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add_review(self, review: LicenceReview) -> LicenceReview:
        row = LicenceReviewRecord(
            endpoint=review.endpoint, licence_version=review.licence_version, reviewer=review.reviewer,
            reviewed_at=review.reviewed_at, classification=review.classification,
            third_party_exposure=review.third_party_exposure, maas_revenue_over_threshold=review.maas_revenue_over_threshold,
            separate_agreement=review.separate_agreement, attribution=review.attribution, expires_at=review.expires_at,
        )
        self.session.add(row)
        self.session.flush()
        return _review(row)

    def reviews(self, endpoint: str | None = None) -> list[LicenceReview]:
        """Reviews (of ``endpoint``), newest first."""
        stmt = select(LicenceReviewRecord).order_by(LicenceReviewRecord.id.desc())
        if endpoint is not None:
            stmt = stmt.where(LicenceReviewRecord.endpoint == endpoint)
        return [_review(r) for r in self.session.scalars(stmt).all()]

    def exception(self, ident: str) -> SecurityException | None:
        row = self.session.get(SecurityExceptionRecord, ident)
        return None if row is None else _exception(row)

    def add_exception(self, exception: SecurityException) -> SecurityException:
        row = SecurityExceptionRecord(
            id=exception.id, kind=exception.kind, scope=exception.scope, target=exception.target,
            reviewer=exception.reviewer, reason=exception.reason, expires_at=exception.expires_at,
            recorded_at=exception.recorded_at,
        )
        self.session.add(row)
        self.session.flush()
        return _exception(row)

    def exceptions(self, *, current_at: dt.datetime | None = None) -> list[SecurityException]:
        """Every exception (only those not expired at ``current_at`` when given), soonest expiry first."""
        stmt = select(SecurityExceptionRecord).order_by(SecurityExceptionRecord.expires_at, SecurityExceptionRecord.id)
        if current_at is not None:
            stmt = stmt.where(SecurityExceptionRecord.expires_at > current_at)
        return [_exception(r) for r in self.session.scalars(stmt).all()]
