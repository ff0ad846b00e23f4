"""A deployment as people read it: its title, its gates, and what to do next."""

from __future__ import annotations

from bot.domain.read_models import DeploymentView
from bot.domain.states import State
from bot.views.icons import state_icon
from bot.views.parts import Note, Part, Text, person


def state_words(state: str) -> str:
    return State(state).words


def deployment_title(deployment_id: int, kind: str, release: str, endpoint: str, state: str) -> str:
    return f"{state_icon(state)} Deployment #{deployment_id}: {kind} of *{release}* to *{endpoint}* — {state_words(state)}"


def deployment_parts(view: DeploymentView) -> tuple[Part, ...]:
    """A deployment view (from the deployments service): title, gates, what to do next."""
    parts: list[Part] = [Text(deployment_title(view.id, view.kind, view.release, view.endpoint, view.state)
                              + (f"\n_{view.state_reason}_" if view.state_reason else ""))]
    gate_lines = []
    for g in view.gates:
        decided = f"{g.decision} by {person(g.decided_by or 'someone')}" if g.decision else "waiting"
        gate_lines.append(f"• {g.gate}: checks {g.status}, {decided}" + (f" — {g.reason}" if g.reason else ""))
    if gate_lines:
        parts.append(Text("\n".join(gate_lines)))
    if view.rollback_offered:
        parts.append(Note(f"Rollback offered: `/kimi rollback {view.endpoint}`"))
    return tuple(parts)
