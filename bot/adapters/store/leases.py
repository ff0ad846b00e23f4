"""The ``deployment_leases`` table: which replica drives an endpoint's in-flight work, claimed so only one wins.

``claim`` is one ``INSERT … ON CONFLICT DO UPDATE … WHERE`` (SQLite and
PostgreSQL both speak it): a free endpoint gets a row, a row whose lease lapsed
(or that this holder already has) is taken over, a live row of another holder
is left alone. On PostgreSQL two concurrent claims of one row serialize on its
row lock and the second re-reads the first's row, so it sees a live lease and
loses; SQLite writes one transaction at a time. ``renew`` and ``release`` only
touch a row this holder still has, so a replica that lost its lease (it stalled
past the lapse and another took over) cannot extend or drop the new holder's.

Times come from the callers' clocks: replicas must agree on the time to within
a small part of the lease (NTP does).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import CursorResult, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from bot.adapters.store.models import DeploymentLease


class LeaseRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def claim(self, endpoint_id: int, deployment_id: int, holder: str, now: dt.datetime, until: dt.datetime) -> bool:
        """Take (or keep) the endpoint's lease until ``until``; ``False`` when another holder's lease is alive at ``now``."""
        dialect = self.session.get_bind().dialect.name
        insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert
        statement = insert(DeploymentLease).values(
            endpoint_id=endpoint_id, deployment_id=deployment_id, holder=holder, claimed_at=now, expires_at=until
        )
        statement = statement.on_conflict_do_update(
            index_elements=["endpoint_id"],
            set_={"deployment_id": deployment_id, "holder": holder, "claimed_at": now, "expires_at": until},
            where=(DeploymentLease.holder == holder) | (DeploymentLease.expires_at <= now),
        ).returning(DeploymentLease.endpoint_id)  # a row back only when this claim won
        return self.session.execute(statement).first() is not None

    def renew(self, endpoint_id: int, holder: str, until: dt.datetime) -> bool:
        """Push this holder's lease to ``until``; ``False`` when the row is no longer this holder's."""
        result: CursorResult[Any] = self.session.execute(  # type: ignore[assignment]
            update(DeploymentLease)
            .where(DeploymentLease.endpoint_id == endpoint_id, DeploymentLease.holder == holder)
            .values(expires_at=until)
        )
        return result.rowcount == 1

    def release(self, endpoint_id: int, holder: str, now: dt.datetime) -> None:
        """Let the lease lapse now (the row stays, so a takeover sees work left unfinished by a stop)."""
        self.session.execute(
            update(DeploymentLease)
            .where(DeploymentLease.endpoint_id == endpoint_id, DeploymentLease.holder == holder)
            .values(expires_at=now)
        )

    def get(self, endpoint_id: int) -> DeploymentLease | None:
        return self.session.get(DeploymentLease, endpoint_id, populate_existing=True)

    def holds(self, endpoint_id: int, holder: str) -> bool:
        """Whether the row is this holder's (alive or lapsed but not yet taken over: nobody else acts either way)."""
        # FOR UPDATE: a takeover's claim waits until the caller's transaction (a fenced move) commits.
        found = self.session.scalar(
            select(DeploymentLease.holder).where(DeploymentLease.endpoint_id == endpoint_id).with_for_update()
        )
        return found == holder

    def alive(self, now: dt.datetime) -> Sequence[DeploymentLease]:
        return self.session.scalars(select(DeploymentLease).where(DeploymentLease.expires_at > now)).all()
