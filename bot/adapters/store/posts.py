"""The ``slack_posts`` table: a Slack message is claimed before it is posted and its ``ts`` recorded after.

The notifier commits each step in a transaction of its own, apart from the one
that delivers the outbox event, so what Slack has taken stays known even when
that delivery fails afterwards. ``claim`` is one ``INSERT … ON CONFLICT DO
NOTHING`` (SQLite and PostgreSQL both speak it) followed by a read of the row:
a claim already there tells the caller the message was posted (``ts`` set) or
that an earlier try's outcome is unknown (no ``ts``: look in Slack first).
``take_over`` moves such a claim to a new try only from the try that holds it
(compare and set on ``try_id``), so two processes cannot both take it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import CursorResult, delete, func, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from bot.adapters.store.models import SlackPost


@dataclass(frozen=True)
class PostClaim:
    """Where a claimed message is (``ts`` once posted), whether this claim is the first, and when and by which try
    it was claimed (``try_id``: None for a claim made before migration 0019)."""

    channel: str
    ts: str | None
    first: bool
    claimed_at: dt.datetime
    try_id: str | None


class SlackPostRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def claim(self, key: str, channel: str, at: dt.datetime, try_id: str) -> PostClaim:
        """Claim ``key`` for a post to ``channel`` by the try ``try_id``, or read the claim an earlier try left."""
        dialect = self.session.get_bind().dialect.name
        insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert
        statement = (
            insert(SlackPost).values(key=key, channel=channel, claimed_at=at, try_id=try_id)
            .on_conflict_do_nothing(index_elements=["key"])
            .returning(SlackPost.key)  # a row back only when this insert won
        )
        first = self.session.execute(statement).first() is not None
        row = self.session.get(SlackPost, key, populate_existing=True)
        if row is None:  # pragma: no cover - the row was inserted or found just above, in this transaction
            raise RuntimeError(f"the claim of Slack post {key} vanished")
        return PostClaim(channel=row.channel, ts=row.ts, first=first, claimed_at=row.claimed_at, try_id=row.try_id)

    def take_over(self, key: str, held_by: str | None, try_id: str, at: dt.datetime) -> bool:
        """Move an unrecorded claim from the try ``held_by`` to ``try_id``; False when another try took it first."""
        moved: CursorResult[Any] = self.session.execute(  # type: ignore[assignment]
            update(SlackPost)
            .where(SlackPost.key == key, SlackPost.ts.is_(None), func.coalesce(SlackPost.try_id, "") == (held_by or ""))
            .values(try_id=try_id, claimed_at=at)
        )
        return moved.rowcount == 1

    def record(self, key: str, channel: str, ts: str, at: dt.datetime) -> None:
        """Slack took the message: where it is."""
        self.session.execute(update(SlackPost).where(SlackPost.key == key).values(channel=channel, ts=ts, posted_at=at))

    def posted(self, key: str) -> tuple[str, str] | None:
        """Where the message ``key`` names was posted (channel, ts); ``None`` when it was not (or not known yet)."""
        row = self.session.get(SlackPost, key, populate_existing=True)
        return (row.channel, row.ts) if row is not None and row.ts is not None else None

    def release(self, key: str, try_id: str) -> None:
        """Slack refused the try's post (it answered, so nothing was posted): the next try need not look for it.
        A claim another try has taken over since is left to that try."""
        self.session.execute(delete(SlackPost).where(SlackPost.key == key, SlackPost.ts.is_(None),
                                                     SlackPost.try_id == try_id))
