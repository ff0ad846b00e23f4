"""A deployment as people read it: its title, its gates, and what to do next."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence

from bot.domain.chat_text import literal, stored_reason
from bot.domain.read_models import DeploymentView
from bot.domain.states import IllegalTransition, State, next_state
from bot.views.icons import state_icon
from bot.views.parts import Note, Part, Text, moment, person


def state_words(state: str) -> str:
    return State(state).words


def deployment_title(deployment_id: int, kind: str, release: str, endpoint: str, state: str) -> str:
    return f"{state_icon(state)} Deployment #{deployment_id}: {kind} of *{release}* to *{endpoint}* — {state_words(state)}"


def next_step_words(kind: str, state: str) -> str:
    """What comes after ``state`` on the path of a ``kind`` of work, as a person reads it: ``the model gate's checks``."""
    try:
        following = next_state(kind, state)
    except IllegalTransition:
        return "the next step"
    if following.gate is not None:
        return f"the {following.gate} gate's checks"
    return {State.CLOSING: "closing the endpoint to users", State.RAMPING: "the ramp to users",
            State.LIVE: "going live"}.get(following, following.words)


# A rollout watch's line about readiness: "1/1 replicas updated and ready", "pods 0/1 ready".
PODS = re.compile(r"\b\d+/\d+\b.*\bready\b|\bready\b.*\b\d+/\d+\b", re.IGNORECASE)


def elapsed_words(delta: dt.timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def progress_text(state: State, *, requested_at: dt.datetime, step_since: dt.datetime, steps: Sequence[State],
                  pods: str | None, last: str | None) -> str:
    """The deployment's one progress message: the newest step only, the steps so far, pods, the last event.

    Its times are Slack dates (:func:`moment`), which every reader's client keeps current, so the clock moves
    between edits; an ended deployment says how long it took.
    """
    if state.terminal:
        head = f"ended: {state.words} · {elapsed_words(step_since - requested_at)} after it was requested"
    else:
        head = f"{state.during} (this step began {moment(step_since)}) · requested {moment(requested_at)}"
    lines = [f"{state_icon(state)} *Progress:* {head}"]
    if len(steps) > 1:
        lines.append("*steps:* " + " → ".join(f"*{s.words}*" if i == len(steps) - 1 else s.words
                                              for i, s in enumerate(steps)))
    if pods:
        lines.append(f"*pods:* {pods}")
    if last:
        lines.append(f"*last:* {last}")
    return "\n".join(lines)


def deployment_parts(view: DeploymentView) -> tuple[Part, ...]:
    """A deployment view (from the deployments service): title, gates, what to do next."""
    parts: list[Part] = [Text(deployment_title(view.id, view.kind, view.release, view.endpoint, view.state)
                              + (f"\n_{stored_reason(view.state_reason, view.actors)}_" if view.state_reason else ""))]
    gate_lines = []
    for g in view.gates:
        decided = f"{g.decision} by {person(g.decided_by or 'someone')}" if g.decision else "waiting"
        gate_lines.append(f"• {g.gate}: checks {g.status}, {decided}" + (f" — {literal(g.reason)}" if g.reason else ""))
    if gate_lines:
        parts.append(Text("\n".join(gate_lines)))
    if view.rollback_offered:
        parts.append(Note(f"Rollback offered: `/kimi rollback {view.endpoint}`"))
    return tuple(parts)
