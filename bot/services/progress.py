"""What a deployment said as it moved, read back for a terminal: each state change and step line.

The engine writes these into the outbox for the Slack thread (:mod:`bot.domain.events`); a CLI command that runs
the engine in its own process reads the same rows to print progress while a long step (a cold start, a sweep)
runs, and ``--watch`` reads them to follow a deployment another process drives, so the terminal tells the story
the thread does.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from bot.adapters.store.outbox import event_of
from bot.domain.events import AdmissionChanged, RolloutProgress, StateChanged
from bot.domain.read_models import DeploymentView
from bot.domain.states import State
from bot.services.context import Context
from bot.services.deployments import endpoint_row, resolve_endpoint
from bot.services.transitions import deployment_view


@dataclass(frozen=True)
class ProgressLine:
    """One thing a deployment said: when, and the words (``→ applying``, ``pods 0/1 ready``)."""

    event_id: int
    at: dt.datetime
    text: str


def progress_since(ctx: Context, deployment_id: int, after_event: int = 0) -> list[ProgressLine]:
    """The deployment's state changes, rollout lines and admission changes written after event ``after_event``."""
    kinds = {StateChanged.KIND, RolloutProgress.KIND, AdmissionChanged.KIND}
    found: list[ProgressLine] = []
    with ctx.uow() as uow:
        for row in uow.events.for_deployment(deployment_id):
            if row.id <= after_event or row.kind not in kinds:
                continue
            event = event_of(row)
            if isinstance(event, StateChanged):
                text = f"→ {State(event.to_state).words}" + (f": {event.reason}" if event.reason else "")
            elif isinstance(event, RolloutProgress):
                text = event.message
            elif isinstance(event, AdmissionChanged):
                text = event.text
            else:
                continue
            found.append(ProgressLine(row.id, row.at, text))
    return found


def last_event(ctx: Context, deployment_id: int) -> int:
    """The newest outbox row of the deployment (0: none): progress is printed from after it."""
    with ctx.uow() as uow:
        rows = uow.events.for_deployment(deployment_id)
        return rows[-1].id if rows else 0


def in_flight_on(ctx: Context, endpoint_name: str | None) -> tuple[str, DeploymentView | None]:
    """The endpoint's name as declared (the only one when none is named) and its deployment in flight, if any."""
    name = resolve_endpoint(ctx, endpoint_name)
    with ctx.uow() as uow:
        dep = uow.deployments.in_flight(endpoint_row(uow, name).id)
        return name, (deployment_view(uow, dep) if dep is not None else None)
