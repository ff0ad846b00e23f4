"""SQLAlchemy 2 typed models of the release history.

The schema is owned by the Alembic migrations in ``migrations/``; a test runs
Alembic's autogenerate comparison to prove these models and the migrations agree.
Rows that must never change after they are written (releases, audit entries,
decided gate results) are guarded in :mod:`bot.adapters.store.guards`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from bot.domain.states import IN_FLIGHT, State

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timezone-aware UTC on the way in and out, on SQLite as on PostgreSQL."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use timezone-aware UTC")
        return value.astimezone(dt.UTC)

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:  # SQLite keeps no offset; everything stored is UTC
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dt.datetime: UTCDateTime(), dict[str, Any]: JSON(), list[Any]: JSON()}


class Endpoint(Base):
    __tablename__ = "endpoints"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    kind: Mapped[str] = mapped_column(String(16))
    environment: Mapped[str] = mapped_column(String(32))
    namespace: Mapped[str] = mapped_column(String(63))
    url: Mapped[str] = mapped_column(String(512))
    admission_open: Mapped[bool] = mapped_column(Boolean, default=True)
    # What the route lets through now (closed, internal, a share such as 25%, open); admission_open mirrors "open".
    admission: Mapped[str] = mapped_column(String(16), default="open", server_default="open")
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[dt.datetime]
    # The last rollout's cold start (bot.domain.coldstart), written with its readiness step (migration 0017).
    cold_start: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    cold_start_at: Mapped[dt.datetime | None] = mapped_column(default=None)

    __table_args__ = (CheckConstraint("kind IN ('hyperpod', 'eks')", name="kind"),)


class Release(Base):
    """The immutable release tuple: the rollback unit."""

    __tablename__ = "releases"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    model_repo: Mapped[str] = mapped_column(String(256))
    model_commit: Mapped[str] = mapped_column(String(40))
    weights_prefix: Mapped[str] = mapped_column(String(1024))
    objects: Mapped[list[Any]] = mapped_column()
    image: Mapped[str] = mapped_column(String(512))
    serving_args: Mapped[list[Any]] = mapped_column()
    serving_env: Mapped[dict[str, Any]] = mapped_column()
    licence_version: Mapped[str] = mapped_column(String(128))
    licence_uri: Mapped[str | None] = mapped_column(String(1024))
    licence_sha256: Mapped[str] = mapped_column(String(64))
    evaluation_report: Mapped[str | None] = mapped_column(String(1024))
    trust_remote_code_exception: Mapped[str | None] = mapped_column(String(256))
    provenance: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    tuple_hash: Mapped[str] = mapped_column(String(64), index=True)
    registered_by: Mapped[str] = mapped_column(String(128))
    registered_at: Mapped[dt.datetime]


class Deployment(Base):
    """One attempt to make a release live on an endpoint (a persisted state machine).

    ``in_flight`` is ``True`` while the deployment holds its endpoint and ``NULL``
    afterwards; the unique constraint on (endpoint, in_flight) lets the database,
    not the bot, guarantee one deployment in flight per endpoint across replicas.
    A new row takes it from its ``state`` (``True`` for a step before ``live``,
    ``NULL`` for an ended one); a value that contradicts the state is refused, so
    ``in_flight=None`` can never quietly become ``True`` (a column default once did).
    """

    __tablename__ = "deployments"

    id: Mapped[int] = mapped_column(primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("endpoints.id"), index=True)
    release_id: Mapped[int] = mapped_column(ForeignKey("releases.id"))
    kind: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(32))
    state_reason: Mapped[str | None] = mapped_column(Text)
    in_flight: Mapped[bool | None] = mapped_column(Boolean)
    requested_by: Mapped[str] = mapped_column(String(128))
    replaces_release_id: Mapped[int | None] = mapped_column(ForeignKey("releases.id"))
    rollback_of_id: Mapped[int | None] = mapped_column(ForeignKey("deployments.id"))
    applied_manifest: Mapped[str | None] = mapped_column(Text)
    manifest_hash: Mapped[str | None] = mapped_column(String(64))
    slack_channel: Mapped[str | None] = mapped_column(String(32))
    slack_thread_ts: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]
    finished_at: Mapped[dt.datetime | None]
    # Set when the deployment failed after its manifest may have reached the cluster (the reason text says so too,
    # for people; code reads this column).
    rollback_offered: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    # An automatic restore (kind "rollback") names the deployment whose ending started it.
    cause_id: Mapped[int | None] = mapped_column(Integer, default=None)
    # The end a deploy takes once "reopening" gave users back the release that runs.
    ending: Mapped[str | None] = mapped_column(String(16), default=None)
    # kimi-ops's own requests to the candidate while users were closed out (bot.domain.own_requests): those answered
    # in full, which the model's finished counter surely counts, and those broken mid-way, which it may count.
    own_requests: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    own_uncertain: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The candidate's finished-request counter when its readiness passed (users closed out from there on).
    closed_baseline: Mapped[float | None] = mapped_column(Float, default=None)

    endpoint: Mapped[Endpoint] = relationship(lazy="joined")
    release: Mapped[Release] = relationship(foreign_keys=[release_id], lazy="joined")
    replaces_release: Mapped[Release | None] = relationship(foreign_keys=[replaces_release_id])

    __table_args__ = (
        UniqueConstraint("endpoint_id", "in_flight"),
        CheckConstraint("kind IN ('deploy', 'rollback')", name="kind"),
        CheckConstraint("in_flight IS NULL OR in_flight = true", name="in_flight_true_or_null"),
        # The live deployment of an endpoint, and any state of it, without reading its whole history.
        Index("ix_deployments_endpoint_id_state", "endpoint_id", "state"),
        # Every deployment in flight (gate expiry, resume, App Home) without scanning the table.
        Index("ix_deployments_in_flight", "in_flight"),
    )

    def __init__(self, **values: Any) -> None:
        if "state" in values:
            holds = True if State(values["state"]) in IN_FLIGHT else None
            given = values.setdefault("in_flight", holds)
            if given is not holds:
                raise ValueError(f"a deployment in state {values['state']} has in_flight={holds}, not {given!r}")
        super().__init__(**values)


class GateResult(Base):
    """One run of a gate's automated checks and, at most once per gate, its decision.

    ``gate recheck`` adds a new row (reports are never overwritten); the partial
    unique index makes a second decision on the same gate of a deployment impossible.
    """

    __tablename__ = "gate_results"

    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id"), index=True)
    gate: Mapped[str] = mapped_column(String(16))
    report: Mapped[dict[str, Any]] = mapped_column()
    # The report's overall status (its worst check), kept beside it so lists need not decode whole reports.
    status: Mapped[str | None] = mapped_column(String(8), default=None)
    report_hash: Mapped[str] = mapped_column(String(64))
    checked_at: Mapped[dt.datetime]
    decision: Mapped[str | None] = mapped_column(String(16))
    decided_by: Mapped[str | None] = mapped_column(String(128))
    decided_at: Mapped[dt.datetime | None]
    decision_reason: Mapped[str | None] = mapped_column(Text)
    seen: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    slack_channel: Mapped[str | None] = mapped_column(String(32))
    slack_ts: Mapped[str | None] = mapped_column(String(32))
    reminded_at: Mapped[dt.datetime | None] = mapped_column(default=None)

    __table_args__ = (
        CheckConstraint("gate IN ('artifact', 'infrastructure', 'model', 'traffic')", name="gate"),
        CheckConstraint("decision IS NULL OR decision IN ('approved', 'rejected')", name="decision"),
        Index(
            "uq_gate_results_one_decision",
            "deployment_id",
            "gate",
            unique=True,
            sqlite_where=text("decision IS NOT NULL"),
            postgresql_where=text("decision IS NOT NULL"),
        ),
        # The gates waiting for a decision, without reading every decided one.
        Index(
            "ix_gate_results_undecided",
            "deployment_id",
            sqlite_where=text("decision IS NULL"),
            postgresql_where=text("decision IS NULL"),
        ),
    )


class ManifestRevision(Base):
    """One manifest a deployment applied, in order: the first render, then each re-render (accepted limits).

    ``deployments.applied_manifest`` always holds the newest; these rows keep every
    revision with the hash it replaced, so what ran when is never lost and a
    rollback's "exact stored manifest" can be traced to the revision it copied.
    """

    __tablename__ = "manifest_revisions"

    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id"), index=True)
    revision: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    previous_sha256: Mapped[str | None] = mapped_column(String(64))
    manifest: Mapped[str] = mapped_column(Text)
    limits: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    reason: Mapped[str] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(128))
    at: Mapped[dt.datetime]

    __table_args__ = (UniqueConstraint("deployment_id", "revision"),)


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
    by its key before it is posted again.
    """

    __tablename__ = "slack_posts"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    channel: Mapped[str] = mapped_column(String(64))
    ts: Mapped[str | None] = mapped_column(String(64))
    claimed_at: Mapped[dt.datetime]
    posted_at: Mapped[dt.datetime | None]


class DeploymentLease(Base):
    """Which replica drives the in-flight work of one endpoint, until when (see :mod:`bot.adapters.store.leases`).

    Keyed by endpoint, not deployment: a gate run, a traffic sweep and a restore of the same endpoint all
    need it, so two of them never run at once. ``expires_at`` is pushed forward by the holder's heartbeat;
    once it passes, any replica may claim the row.
    """

    __tablename__ = "deployment_leases"

    endpoint_id: Mapped[int] = mapped_column(ForeignKey("endpoints.id", ondelete="CASCADE"), primary_key=True)
    deployment_id: Mapped[int | None] = mapped_column(Integer)
    holder: Mapped[str] = mapped_column(String(200))
    claimed_at: Mapped[dt.datetime]
    expires_at: Mapped[dt.datetime] = mapped_column(index=True)


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
