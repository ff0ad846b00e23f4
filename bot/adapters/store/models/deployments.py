"""Endpoints, releases, deployments, their gate results, applied manifests and the leases that drive them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from bot.adapters.store.models.base import Base
from bot.domain.states import IN_FLIGHT, State


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
