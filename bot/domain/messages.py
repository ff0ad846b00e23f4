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
ACCEPT_LIMITS = "traffic_accept_limits"
# Slack refuses a section over 3,000 characters; a code block must stay inside one section to keep its fences.
SECTION_CHARS = 3000
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
class Detail:
    """Text that belongs beside a message, not in it: the Slack renderer posts it in the thread below.

    ``code`` keeps it monospace (each thread reply gets its own fences, so a long table never loses them).
    """

    text: str
    code: bool = False


@dataclass(frozen=True)
class Button:
    label: str
    action_id: str
    value: str
    style: Literal["primary", "danger"] | None = None


@dataclass(frozen=True)
class Buttons:
    buttons: tuple[Button, ...]


Part = Union[Heading, Text, Note, Divider, Buttons, Detail]


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
        *report_tables(rep),
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


# ---------------------------------------------------------------------------- report tables
#
# One piece of code for the CLI text (bot.services.gate_text) and the Slack message: the
# rows below are what both print; each front end only chooses the columns and the frame.


def cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value)


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A left-aligned plain-text table (monospace)."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)
    return "\n".join(lines)


LATENCY_ROWS = (("latency p50 ms", "latency_p50_ms"), ("latency p95 ms", "latency_p95_ms"),
                ("TTFT p50 ms", "ttft_p50_ms"), ("TTFT p95 ms", "ttft_p95_ms"))


def model_comparison(evaluation: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Pass rate per kind and latency percentiles, this release beside production (headers, rows)."""
    summary = evaluation.get("summary") or {}
    production = (evaluation.get("production") or {}).get("summary") or {}
    prod_release = (evaluation.get("production") or {}).get("release")
    kinds = sorted(set(summary.get("kinds", {})) | set(production.get("kinds", {})))
    rows: list[list[Any]] = []
    for kind in kinds:
        now = summary.get("kinds", {}).get(kind)
        before = production.get("kinds", {}).get(kind)
        rows.append([kind, f"{now['passed']}/{now['total']}" if now else None, pct(now["pass_rate"]) if now else None,
                     pct(before["pass_rate"]) if before else None])
    for label, key in LATENCY_ROWS:
        rows.append([label, "", summary.get(key), production.get(key)])
    return ["kind", "passed", "this release", f"production {prod_release or ''}".strip()], rows


SWEEP_COLUMNS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "prefix": lambda lv: lv["prefix"],
    "conc": lambda lv: lv["concurrency"],
    "reqs": lambda lv: lv["requests"],
    "429": lambda lv: lv["rejected"],
    "err": lambda lv: lv.get("errors"),
    "TTFT p50": lambda lv: lv.get("ttft_p50_ms"),
    "TTFT p99": lambda lv: lv.get("ttft_p99_ms"),
    "done p99": lambda lv: lv.get("completion_p99_ms"),
    "queue": lambda lv: None if lv.get("queue_depth") is None else int(lv["queue_depth"]),
    "KV": lambda lv: pct(lv.get("kv_cache_usage")),
    "hit": lambda lv: pct(lv.get("prefix_cache_hit_rate")),
    "objectives": lambda lv: "; ".join(lv.get("broken", [])) or "ok",
}
# What fits a Slack message beside the checks; the CLI prints every column.
SWEEP_SLACK_COLUMNS = ("prefix", "conc", "429", "TTFT p99", "done p99", "objectives")


def sweep_table(levels: Sequence[dict[str, Any]], columns: Sequence[str] = tuple(SWEEP_COLUMNS)) -> str:
    """The sweep's levels, per prefix mode then concurrency, in the chosen columns."""
    ordered = sorted(levels, key=lambda lv: (lv["prefix"], lv["concurrency"]))
    return text_table(list(columns), [[SWEEP_COLUMNS[c](lv) for c in columns] for lv in ordered])


def fenced_parts(caption: str, table: str, *, what: str = "rows") -> list[Part]:
    """``table`` in a code block under ``caption``, within one section; a longer one is cut and posted whole in the thread."""
    whole = f"{caption}\n```\n{table}\n```"
    if len(whole) <= SECTION_CHARS:
        return [Text(whole)]
    lines = table.split("\n")
    kept: list[str] = []
    for line in lines:
        tail = f"\n… {len(lines) - len(kept)} more {what} in the thread below"
        if len(caption) + len("\n".join([*kept, line])) + len(tail) + 12 > SECTION_CHARS:
            break
        kept.append(line)
    rest = len(lines) - len(kept)
    return [Text(f"{caption}\n```\n" + "\n".join(kept) + f"\n```\n… {rest} more {what} in the thread below"),
            Detail(table, code=True)]


def report_tables(report: GateReport) -> list[Part]:
    """The compact tables of a model gate (beside production, when there is a baseline) or a traffic gate."""
    attachments = report.attachments or {}
    if report.gate == "model":
        evaluation = attachments.get("evaluation") or {}
        if not evaluation.get("production"):
            return []
        headers, rows = model_comparison(evaluation)
        release = evaluation["production"].get("release") or "the live release"
        return fenced_parts(f"*Compared with production ({release}):*", text_table(headers, rows))
    if report.gate == "traffic":
        levels = (attachments.get("sweep") or {}).get("levels") or []
        if not levels:
            return []
        return fenced_parts("*Sweep* (ms; 429 = rejected requests):", sweep_table(levels, SWEEP_SLACK_COLUMNS), what="levels")
    return []


# ---------------------------------------------------------------------------- accepted request limits

# A proposal measured a release; once that deployment ended without going live, or another release replaced
# it, the proposal no longer describes what serves, so it is neither offered nor accepted.
LIMITS_CLOSED_STATES = frozenset({"rejected", "failed", "cancelled", "interrupted", "superseded"})
LIMITS_ACCEPTED = "endpoint.limits_accepted"


@dataclass(frozen=True)
class LimitsAcceptance:
    """Who accepted a traffic report's proposal into the endpoint's settings, and when."""

    accepted_by: str
    accepted_at: dt.datetime
    accepted: dict[str, Any]
    previous: dict[str, Any]


def proposed_limits(report: dict[str, Any] | GateReport) -> dict[str, Any] | None:
    """The traffic report's proposal, or ``None`` when it proposed nothing."""
    attachments = (report.attachments if isinstance(report, GateReport) else report.get("attachments")) or {}
    proposal = attachments.get("proposal") or {}
    return proposal if proposal.get("max_concurrent_requests") else None


def limits_words(limits: dict[str, Any]) -> str:
    return f"maxConcurrentRequests {limits.get('max_concurrent_requests')}, maxQueueSize {limits.get('max_queue_size') or 0}"


def same_limits(proposal: dict[str, Any], effective: dict[str, Any]) -> bool:
    return (int(proposal["max_concurrent_requests"]) == int(effective["max_concurrent_requests"])
            and int(proposal.get("max_queue_size") or 0) == int(effective.get("max_queue_size") or 0))


def find_acceptance(entries: Sequence[tuple[str, str, dt.datetime, dict[str, Any]]], deployment_id: int,
                    report_hash: str) -> LimitsAcceptance | None:
    """The acceptance of exactly this report among audit entries ``(action, actor, at, details)``."""
    for action, actor, at, details in entries:
        if action == LIMITS_ACCEPTED and details.get("report_hash") == report_hash and details.get("deployment_id") == deployment_id:
            return LimitsAcceptance(actor, at, dict(details.get("accepted") or {}), dict(details.get("previous") or {}))
    return None


def accepted_note(acceptance: LimitsAcceptance) -> Note:
    prev = acceptance.previous
    return Note(f":white_check_mark: Limits accepted by <@{acceptance.accepted_by}> at {acceptance.accepted_at:%Y-%m-%d %H:%M} UTC: "
                f"{limits_words(acceptance.accepted)} (was {prev.get('max_concurrent_requests')} / "
                f"{prev.get('max_queue_size')}); the next rendered manifest uses them")


def limits_parts(
    report: dict[str, Any] | GateReport,
    *,
    effective: dict[str, Any],
    acceptance: LimitsAcceptance | None,
    ticket: GateTicket | None,
) -> tuple[Part, ...]:
    """Under a traffic report: who accepted its proposal, or the Accept button while it differs from ``effective``.

    ``ticket`` is ``None`` where the proposal may no longer be accepted (an older report, a deployment that ended).
    """
    if acceptance is not None:
        return (accepted_note(acceptance),)
    proposal = proposed_limits(report)
    if proposal is None or ticket is None:
        return ()
    if same_limits(proposal, effective):
        return (Note(f"The endpoint already runs with the proposed limits ({limits_words(proposal)})."),)
    return (
        Text(f"*Proposed limits:* {limits_words(proposal)} — the endpoint now admits "
             f"{effective.get('max_concurrent_requests')} concurrent, queue {effective.get('max_queue_size')}."),
        Buttons((Button("Accept proposed limits", ACCEPT_LIMITS, ticket.encode()),)),
    )


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
        if isinstance(p, (Heading, Text, Note, Detail)):
            out.append(p.text)
        elif isinstance(p, Buttons):
            out.append(" ".join(f"[{b.label}]" for b in p.buttons))
    return "\n".join(out)
