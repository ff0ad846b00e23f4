"""The ``slack_deliveries`` table: claim a Slack request's key once across every replica, forget old keys.

``claim`` is one ``INSERT … ON CONFLICT DO NOTHING`` (both SQLite and
PostgreSQL speak it): the database, not a lock in some process, decides which
of several replicas takes a request on, and a losing insert neither raises nor
aborts the transaction.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import CursorResult, delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from bot.adapters.store.models import SlackDelivery


class DeliveryRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def claim(self, key: str, at: dt.datetime) -> bool:
        """Insert ``key``; ``True`` when this call inserted it, ``False`` when someone had already."""
        dialect = self.session.get_bind().dialect.name
        insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert
        statement = (
            insert(SlackDelivery)
            .values(key=key, received_at=at)
            .on_conflict_do_nothing(index_elements=["key"])
            .returning(SlackDelivery.key)  # a row back only when this insert won (rowcount is not reliable here)
        )
        return self.session.execute(statement).first() is not None

    def forget_before(self, cutoff: dt.datetime) -> int:
        """Delete the keys received before ``cutoff``; how many went."""
        result: CursorResult[Any] = self.session.execute(  # type: ignore[assignment]
            delete(SlackDelivery).where(SlackDelivery.received_at < cutoff)
        )
        return result.rowcount
