"""A chat-neutral message model and the renderings of domain values shared by every front end.

Slack commands, the outbox notifier and the local shell all describe what a
person should see with these frozen values (headings, markdown text, notes,
buttons); :mod:`bot.adapters.slack.blocks` turns them into Block Kit within
Slack's limits. Keeping them pure means the commands never import Slack
adapters and the same gate report reads identically everywhere.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from bot.domain.checks import STATUS_ORDER, GateReport

APPROVE = "gate_approve"
REJECT = "gate_reject"
RECHECK = "gate_recheck"
REJECT_MODAL = "gate_reject_reason"
STATUS_ICON = {"pass": ":white_check_mark:", "warn": ":warning:", "fail": ":x:", "error": ":exclamation:"}


@dataclass(frozen=True)
class Heading:
    text: str


@dataclass(frozen=True)
class Text:
    """Markdown (Slack ``mrkdwn``) paragraph."""

    text: str


@dataclass(frozen=True)
class Note:
    """Small grey context line."""

    text: str


@dataclass(frozen=True)
class Divider:
    pass


@dataclass(frozen=True)
class Button:
    label: str
    action_id: str
    value: str
    style: Literal["primary", "danger"] | None = None


@dataclass(frozen=True)
class Buttons:
    buttons: tuple[Button, ...]


Part = Union[Heading, Text, Note, Divider, Buttons]


@dataclass(frozen=True)
class Reply:
    """What one command answers: parts to show, a plain-text fallback, who sees it, and slow work to run after."""

    parts: tuple[Part, ...]
    text: str
    ephemeral: bool = True
    # Runs after Slack got its acknowledgement; its reply (if any) is posted the same way.
    then: Callable[[], "Reply | None"] | None = field(default=None, compare=False)
    # The deployment this reply opened, so its thread can go where the request was made.
    deployment_id: int | None = None


def reply(
    *lines: str,
    ephemeral: bool = True,
    then: Callable[[], "Reply | None"] | None = None,
    deployment_id: int | None = None,
) -> Reply:
    """A plain reply: one text part made of ``lines``."""
    body = "\n".join(lines)
    return Reply(parts=(Text(body),), text=body, ephemeral=ephemeral, then=then, deployment_id=deployment_id)


# ---------------------------------------------------------------------------- gate reports


@dataclass(frozen=True)
class GateTicket:
    """What a gate button carries: the decision is bound to the report and release the clicker saw."""

    deployment_id: int
    gate: str
    report_hash: str
    release_hash: str

    def encode(self) -> str:
        return json.dumps({"d": self.deployment_id, "g": self.gate, "r": self.report_hash, "h": self.release_hash},
                          separators=(",", ":"))

    @classmethod
    def decode(cls, value: str) -> "GateTicket":
        data = json.loads(value)
        return cls(int(data["d"]), str(data["g"]), str(data["r"]), str(data["h"]))


def check_lines(report: GateReport) -> list[str]:
    """One line per check, the worst first (what a reviewer must read first)."""
    ordered = sorted(report.checks, key=lambda c: -STATUS_ORDER[c.status])
    return [f"{STATUS_ICON[c.status]} *{c.name}* ({c.status}): {c.reason}" for c in ordered]


def status_counts(report: GateReport) -> str:
    counts = {s: sum(1 for c in report.checks if c.status == s) for s in ("pass", "warn", "fail", "error")}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no checks"


def gate_parts(
    report: dict[str, Any] | GateReport,
    *,
    deployment_id: int,
    release: str,
    endpoint: str,
    kind: str = "deploy",
    ticket: GateTicket | None = None,
) -> tuple[Part, ...]:
    """A gate's check report with Approve/Reject buttons when ``ticket`` is given (undecided gates)."""
    rep = report if isinstance(report, GateReport) else GateReport.model_validate(report)
    title = f"{rep.gate.capitalize()} gate · deployment #{deployment_id}"
    parts: list[Part] = [
        Heading(title),
        Text(f"{kind} of *{release}* to *{endpoint}* — checks *{rep.status}* ({status_counts(rep)})"
             + (f"\n{rep.summary}" if rep.summary else "")),
        *[Text(line) for line in check_lines(rep)],
    ]
    if ticket is not None:
        if rep.approvable:
            parts.append(Buttons((
                Button("Approve", APPROVE, ticket.encode(), "primary"),
                Button("Reject", REJECT, ticket.encode(), "danger"),
            )))
        else:
            names = ", ".join(c.name for c in rep.blocking)
            parts.append(Note(f"Approval is blocked by {names}: fix the cause and re-run the checks, or reject."))
            parts.append(Buttons((
                Button("Re-run checks", RECHECK, ticket.encode()),
                Button("Reject", REJECT, ticket.encode(), "danger"),
            )))
    return tuple(parts)


def decided_note(decision: str, decided_by: str, decided_at: dt.datetime, reason: str | None) -> Note:
    verb = ":white_check_mark: Approved" if decision == "approved" else ":no_entry: Rejected"
    why = f" — {reason}" if reason else ""
    return Note(f"{verb} by <@{decided_by}> at {decided_at:%Y-%m-%d %H:%M} UTC{why}")


# ---------------------------------------------------------------------------- deployments


STATE_ICON = {
    "live": ":large_green_circle:", "failed": ":red_circle:", "rejected": ":no_entry:", "cancelled": ":black_circle:",
    "interrupted": ":black_circle:", "superseded": ":white_circle:",
}


def state_words(state: str) -> str:
    return state.replace("_", " ")


def deployment_title(deployment_id: int, kind: str, release: str, endpoint: str, state: str) -> str:
    icon = STATE_ICON.get(state, ":hourglass_flowing_sand:")
    return f"{icon} Deployment #{deployment_id}: {kind} of *{release}* to *{endpoint}* — {state_words(state)}"


def deployment_parts(view: Any) -> tuple[Part, ...]:
    """A deployment view (from the deployments service): title, gates, what to do next."""
    parts: list[Part] = [Text(deployment_title(view.id, view.kind, view.release, view.endpoint, view.state)
                              + (f"\n_{view.state_reason}_" if view.state_reason else ""))]
    gate_lines = []
    for g in view.gates:
        decided = f"{g.decision} by <@{g.decided_by}>" if g.decision else "waiting"
        gate_lines.append(f"• {g.gate}: checks {g.status}, {decided}" + (f" — {g.reason}" if g.reason else ""))
    if gate_lines:
        parts.append(Text("\n".join(gate_lines)))
    if getattr(view, "rollback_offered", False):
        parts.append(Note(f"Rollback offered: `/kimi rollback {view.endpoint}`"))
    return tuple(parts)


def plain(parts: Sequence[Part]) -> str:
    """A plain-text fallback of ``parts`` (notification text, logs)."""
    out = []
    for p in parts:
        if isinstance(p, (Heading, Text, Note)):
            out.append(p.text)
        elif isinstance(p, Buttons):
            out.append(" ".join(f"[{b.label}]" for b in p.buttons))
    return "\n".join(out)
