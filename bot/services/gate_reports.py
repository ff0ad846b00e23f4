"""The stored reports of a deployment's gates, read back (``gate report``, the Slack report view, a limits proposal),
and a model or traffic report's plot drawn from its numbers."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from bot.adapters.gate_plots import gate_png
from bot.domain.states import STATE_OF_GATE, State
from bot.services.context import Context
from bot.services.errors import NotFound


@dataclass(frozen=True)
class StoredGateReport:
    """The newest stored report of one gate of a deployment, with its decision if one was made."""

    deployment_id: int
    kind: str
    release: str
    endpoint: str
    gate: str
    report: dict[str, Any]
    report_hash: str
    checked_at: dt.datetime
    checks_run: int
    decision: str | None
    decided_by: str | None
    decided_at: dt.datetime | None
    decision_reason: str | None
    actors: frozenset[str] = frozenset()
    """Who acted on the deployment: the only ids its check reasons mention."""


def stored_gate_report(ctx: Context, deployment_id: int, gate: str) -> StoredGateReport:
    """The latest report of ``gate`` for ``deployment_id`` (a recheck adds one; the newest is what was decided on)."""
    if gate not in STATE_OF_GATE:
        raise NotFound(f"no gate named {gate}; the gates are {', '.join(STATE_OF_GATE)}")
    with ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        if dep is None:
            raise NotFound(f"no deployment #{deployment_id}; `/kimi history` lists them")
        rows = [r for r in uow.gates.for_deployment(dep.id) if r.gate == gate]
        if not rows:
            why = ("a rollback has only an artifact gate (and its evaluation)" if dep.kind == "rollback"
                   else f"the deployment is {State(dep.state).words}")
            raise NotFound(f"deployment #{dep.id} has no {gate} gate report ({why})")
        row = rows[-1]
        return StoredGateReport(
            deployment_id=dep.id, kind=dep.kind, release=dep.release.name, endpoint=dep.endpoint.name, gate=gate,
            report=row.report,
            report_hash=row.report_hash, checked_at=row.checked_at, checks_run=len(rows), decision=row.decision,
            decided_by=row.decided_by, decided_at=row.decided_at, decision_reason=row.decision_reason,
            actors=uow.audit.actors([dep.id])[dep.id] | {dep.requested_by},
        )


def gate_plot(stored: StoredGateReport) -> bytes | None:
    """The PNG of a stored model or traffic report, drawn from its numbers (None: the report has none to draw)."""
    return gate_png(stored.report, endpoint=stored.endpoint, release=stored.release)
