"""The audit log, the outbox of events, and Slack's deliveries, work and posts."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    ForeignKey,
    Index,
    Integer,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from bot.adapters.store.models.base import Base


class AuditEntry(Base):
    """Append-only audit log: one row for every state change and refusal."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[dt.datetime] = mapped_column(index=True)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(256))
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    correlation_id: Mapped[str | None] = mapped_column(String(64))

    # One subject's rows (a deployment's, a job's runs), newest first, without scanning the log.
    __table_args__ = (Index("ix_audit_log_subject_id", "subject", "id"),)


class Event(Base):
    """Transactional outbox of notifications (thread messages, alerts).

    Written in the same transaction as the change it reports, delivered
    afterwards; an undelivered event survives a crash and is sent on restart.
    """

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_endpoint_name_kind_id", "endpoint_name", "kind", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[dt.datetime]
    kind: Mapped[str] = mapped_column(String(64))
    deployment_id: Mapped[int | None] = mapped_column(ForeignKey("deployments.id"), index=True)
    endpoint_name: Mapped[str | None] = mapped_column(String(63))
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    delivered_at: Mapped[dt.datetime | None] = mapped_column(index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)


class SlackDelivery(Base):
    """One Slack request some replica has taken on, kept while Slack may still send it again.

    ``key`` names the request, not its envelope (see :func:`bot.slack.middleware.replay_guard.delivery_key`):
    the Events API's ``event_id``, an interaction's ``trigger_id``, else a hash of the body. Every replica
    inserts the key before handling a request; the primary key lets exactly one insert win, so the same
    request delivered to several replicas, replayed, or retried after it was handled runs once.
    """

    __tablename__ = "slack_deliveries"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    received_at: Mapped[dt.datetime] = mapped_column(index=True)


class SlackWork(Base):
    """The work after a Slack acknowledgement, recorded by the process that answered Slack for the worker process.

    ``request`` is the typed job (:class:`bot.slack.job.Job` as JSON: its arguments, actor, channel, thread,
    response URL, trigger and request key), never the raw Slack body, and ``function`` its kind (the handler).
    A worker takes a row by setting ``holder`` and ``lease_until`` (renewed while it works) and deletes it
    when done; a row whose lease lapsed (its worker died) is taken by the next worker that looks.
    """

    __tablename__ = "slack_work"

    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[dt.datetime]
    function: Mapped[str] = mapped_column(String(64))
    request: Mapped[dict[str, Any]] = mapped_column()
    holder: Mapped[str | None] = mapped_column(String(128))
    lease_until: Mapped[dt.datetime | None] = mapped_column()
    attempts: Mapped[int] = mapped_column(Integer, default=0)


class SlackPost(Base):
    """One Slack message the notifier means to post, claimed before the Web API call (see :mod:`bot.adapters.store.posts`).

    ``key`` names the message, not the attempt: ``deployment:<id>`` for a thread's root, ``gate:<id>`` for a
    gate message, ``event:<id>`` for the reply an outbox event makes (``…/<n>`` for its overflow pieces),
    ``plot:<id>`` for a gate's uploaded plot. The row is committed before posting and ``ts`` right after, each
    in its own transaction, so a post is never repeated because the delivery around it failed; a row without
    ``ts`` is a post whose outcome is unknown (the replica died, or the answer was lost), looked up in Slack
    by its key before it is posted again. ``try_id`` names the try that holds the claim: another takes it over
    only from that try (migration 0019).
    """

    __tablename__ = "slack_posts"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    channel: Mapped[str] = mapped_column(String(64))
    ts: Mapped[str | None] = mapped_column(String(64))
    claimed_at: Mapped[dt.datetime]
    try_id: Mapped[str | None] = mapped_column(String(32))
    posted_at: Mapped[dt.datetime | None]
