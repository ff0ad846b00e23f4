"""Events of a deployment's thread: requested, state changes, gates, limits, plots, rollout progress."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bot.domain.events.base import SPREAD, OutboxEvent, key_field


@dataclass(frozen=True, kw_only=True)
class DeploymentRequested(OutboxEvent):
    """A deployment was opened: the notifier posts its thread's root message."""

    KIND: ClassVar[str] = "deployment.requested"
    deployment_id: int
    release: str | None
    kind: str
    replaces: int | None = None


@dataclass(frozen=True, kw_only=True)
class StateChanged(OutboxEvent):
    """A deployment moved; ``details`` are the step's own facts (manifest hash, timings, …)."""

    KIND: ClassVar[str] = "deployment.state"
    deployment_id: int
    from_state: str = field(metadata=key_field("from"))
    to_state: str = field(metadata=key_field("to"))
    reason: str | None
    release: str
    kind: str
    details: dict[str, Any] = field(default_factory=dict, metadata=SPREAD)


@dataclass(frozen=True, kw_only=True)
class GateWaiting(OutboxEvent):
    """A gate's checks ran and its report waits for a decision."""

    KIND: ClassVar[str] = "gate.waiting"
    deployment_id: int
    gate: str
    gate_result_id: int
    report: dict[str, Any]
    report_hash: str
    release: str
    release_hash: str
    requested_by: str
    kind: str


@dataclass(frozen=True, kw_only=True)
class GateDecided(OutboxEvent):
    """Someone approved or rejected a gate, bound to the report and release they saw."""

    KIND: ClassVar[str] = "gate.decided"
    deployment_id: int
    gate: str
    decision: str
    reason: str | None
    gate_result_id: int
    report_hash: str
    release_hash: str
    release: str
    status: str
    decided_by: str
    decided_at: dt.datetime
    slack_channel: str | None = None
    slack_ts: str | None = None


@dataclass(frozen=True, kw_only=True)
class LimitsAccepted(OutboxEvent):
    """A traffic report's proposed request limits were stored in its endpoint's settings."""

    KIND: ClassVar[str] = "limits.accepted"
    deployment_id: int
    gate_result_id: int
    report_hash: str
    previous: dict[str, Any]
    accepted: dict[str, Any]
    accepted_by: str
    accepted_at: dt.datetime


@dataclass(frozen=True, kw_only=True)
class GatePlot(OutboxEvent):
    """A gate report's plot to upload into the thread (its own event, so a failed upload is retried alone)."""

    KIND: ClassVar[str] = "gate.plot"
    deployment_id: int
    gate: str
    gate_result_id: int


@dataclass(frozen=True, kw_only=True)
class RolloutProgress(OutboxEvent):
    """What a rollout watch or readiness attempt saw, said in the thread."""

    KIND: ClassVar[str] = "rollout.progress"
    deployment_id: int
    message: str
    state: str | None = None
