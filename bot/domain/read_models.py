"""What the deployment use cases answer with: frozen read models of a deployment and its gates.

The services (:mod:`bot.services.deployments`) build them from stored rows;
every front end (Slack commands, the CLI, the neutral views in ``bot/views``)
reads them by their typed fields. They live in the domain so a renderer can name
them without importing the services that fill them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from bot.domain.checks import GateReport
from bot.domain.states import State


@dataclass(frozen=True)
class PendingGate:
    """A gate waiting for a decision, with the report and release hashes a decision must be bound to."""

    deployment_id: int
    gate: str
    report: dict[str, Any]
    report_hash: str
    release_name: str
    release_hash: str
    endpoint: str
    requested_by: str
    checked_at: dt.datetime
    above_limits: str | None = None
    """What a plain approval would go live with when that is above the traffic gate's measured safe limits."""
    actors: frozenset[str] = frozenset()
    """Who acted on the deployment (see :attr:`DeploymentView.actors`)."""

    @property
    def approvable(self) -> bool:
        return GateReport.model_validate(self.report).approvable


@dataclass(frozen=True)
class GateSummary:
    gate: str
    status: str
    decision: str | None
    decided_by: str | None
    decided_at: dt.datetime | None
    reason: str | None


@dataclass(frozen=True)
class DeploymentView:
    id: int
    endpoint: str
    release: str
    release_hash: str
    kind: str
    state: State
    state_reason: str | None
    requested_by: str
    replaces_release: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None
    manifest_hash: str | None
    gates: list[GateSummary] = field(default_factory=list)
    pending: PendingGate | None = None
    # Stored when the deployment failed after its manifest may have reached the cluster.
    rollback_offered: bool = False
    actors: frozenset[str] = frozenset()
    """Who its records say acted on it (asked, decided a gate, cancelled…): the only ids its stored reasons mention."""

    @property
    def in_flight(self) -> bool:
        return self.state.holds_endpoint

    @property
    def duration(self) -> dt.timedelta | None:
        return (self.finished_at - self.created_at) if self.finished_at else None


@dataclass(frozen=True)
class RolledBack:
    """A service rolled back: every user moved to ``to_side`` (running ``release``) in one route change."""

    service: str
    to_side: str
    from_side: str
    release: str | None
    users_get: str
