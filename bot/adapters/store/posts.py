"""The ``slack_posts`` table: a Slack message is claimed before it is posted and its ``ts`` recorded after.

The notifier commits each step in a transaction of its own, apart from the one
that delivers the outbox event, so what Slack has taken stays known even when
that delivery fails afterwards. ``claim`` is one ``INSERT … ON CONFLICT DO
NOTHING`` (SQLite and PostgreSQL both speak it) followed by a read of the row:
a claim already there tells the caller the message was posted (``ts`` set) or
that an earlier try's outcome is unknown (no ``ts``: look in Slack first).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from bot.adapters.store.models import SlackPost


@dataclass(frozen=True)
class PostClaim:
    """Where a claimed message is (``ts`` once posted), when it was claimed and whether this claim is the first."""

    channel: str
    ts: str | None
    first: bool
    claimed_at: dt.datetime


class SlackPostRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def claim(self, key: str, channel: str, at: dt.datetime) -> PostClaim:
        """Claim ``key`` for a post to ``channel``, or read the claim an earlier try left."""
        dialect = self.session.get_bind().dialect.name
        insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert
        statement = (
            insert(SlackPost).values(key=key, channel=channel, claimed_at=at)
            .on_conflict_do_nothing(index_elements=["key"])
            .returning(SlackPost.key)  # a row back only when this insert won
        )
        first = self.session.execute(statement).first() is not None
        row = self.session.get(SlackPost, key, populate_existing=True)
        if row is None:  # pragma: no cover - the row was inserted or found just above, in this transaction
            raise RuntimeError(f"the claim of Slack post {key} vanished")
        return PostClaim(channel=row.channel, ts=row.ts, first=first, claimed_at=row.claimed_at)

    def record(self, key: str, channel: str, ts: str, at: dt.datetime) -> None:
        """Slack took the message: where it is."""
        self.session.execute(update(SlackPost).where(SlackPost.key == key).values(channel=channel, ts=ts, posted_at=at))

    def posted(self, key: str) -> tuple[str, str] | None:
        """Where the message ``key`` names was posted (channel, ts); ``None`` when it was not (or not known yet)."""
        row = self.session.get(SlackPost, key, populate_existing=True)
        return (row.channel, row.ts) if row is not None and row.ts is not None else None

    def release(self, key: str) -> None:
        """Slack refused the post (it answered, so nothing was posted): the next try need not look for it."""
        self.session.execute(delete(SlackPost).where(SlackPost.key == key, SlackPost.ts.is_(None)))
