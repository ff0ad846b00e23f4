"""Gate messages: a check report with its tables and buttons, who decided it, and the traffic gate's proposed limits.

Whether a proposal may still be accepted is the domain's rule
(:mod:`bot.domain.limits`); the caller says so by handing a ticket or ``None``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Collection, Mapping
from typing import Any

from bot.config import EndpointSettings
from bot.domain.chat_text import literal, stored_reason
from bot.domain.checks import STATUS_ORDER, GateReport
from bot.domain.limits import (
    LimitsAcceptance,
    limits_above,
    limits_words,
    proposed_limits,
    same_limits,
)
from bot.views.actions import (
    ACCEPT_AND_APPROVE,
    ACCEPT_LIMITS,
    APPROVE,
    APPROVE_ABOVE_LIMITS,
    RECHECK,
    REJECT,
    SHOW_CHECKS,
    GateTicket,
)
from bot.views.icons import STATUS_ICON, Icon
from bot.views.parts import Button, Buttons, Heading, Note, Part, Table, Text, person
from bot.views.tables import (
    SWEEP_COMPACT_COLUMNS,
    model_comparison,
    sweep_table,
    text_table,
)


def check_lines(report: GateReport, *, actors: Collection[str], passing: bool = True) -> list[str]:
    """One line per check, the worst first (what a reviewer must read first); without ``passing``, only the others.
    Only the ids of ``actors`` (who acted on the deployment) in a reason are mentions."""
    ordered = sorted(report.checks, key=lambda c: -STATUS_ORDER[c.status])
    return [f"{STATUS_ICON[c.status]} *{c.name}* ({c.status}): {stored_reason(c.reason, actors)}" for c in ordered
            if passing or c.status != "pass"]


def passed_line(report: GateReport) -> str | None:
    """Passing checks as one count (as GitHub Checks collapse them): failures and warnings are what a reviewer reads."""
    passed = sum(1 for c in report.checks if c.status == "pass")
    if not passed:
        return None
    return f"{STATUS_ICON['pass']} {passed} check{'s' if passed != 1 else ''} passed"


def show_checks_value(deployment_id: int, gate: str) -> str:
    return json.dumps({"d": deployment_id, "g": gate}, separators=(",", ":"))


def status_counts(report: GateReport) -> str:
    counts = {s: sum(1 for c in report.checks if c.status == s) for s in ("pass", "warn", "fail", "error")}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no checks"


def _report(report: Mapping[str, Any] | GateReport) -> GateReport:
    return report if isinstance(report, GateReport) else GateReport.model_validate(report)


def gate_parts(
    report: Mapping[str, Any] | GateReport,
    *,
    deployment_id: int,
    release: str,
    endpoint: str,
    actors: Collection[str],
    kind: str = "deploy",
    ticket: GateTicket | None = None,
    above_limits: str | None = None,
) -> tuple[Part, ...]:
    """A gate's check report with Approve/Reject buttons when ``ticket`` is given (undecided gates); only the ids of
    ``actors`` (who acted on the deployment) in its reasons are mentions.

    ``above_limits`` (a traffic gate whose endpoint admits more than its sweep measured safe: what it would go live
    with) replaces the plain Approve, which would be refused, with the two approvals that can succeed: accept the
    proposal and approve, or approve above the limits and say why.
    """
    rep = _report(report)
    title = f"{rep.gate.capitalize()} gate · deployment #{deployment_id}"
    parts: list[Part] = [
        Heading(title),
        Text(f"{kind} of *{release}* to *{endpoint}* — checks *{rep.status}* ({status_counts(rep)})"
             + (f"\n{rep.summary}" if rep.summary else "")),
        *report_tables(rep),
        *[Text(line) for line in check_lines(rep, actors=actors, passing=False)],
    ]
    passed = passed_line(rep)
    if passed:
        parts.append(Text(passed))
    # While the gate waits, its reviewer may want every line: "Show all" sends the full list to the clicker alone.
    show_all = (Button(f"Show every check ({len(rep.checks)})", SHOW_CHECKS, show_checks_value(deployment_id, rep.gate)),) \
        if passed and ticket is not None else ()
    if ticket is not None:
        if rep.approvable and above_limits is not None:
            parts.append(Buttons((
                Button("Accept limits and approve", ACCEPT_AND_APPROVE, ticket.encode(), "primary"),
                Button("Approve above the limits…", APPROVE_ABOVE_LIMITS, ticket.encode()),
                Button("Reject", REJECT, ticket.encode(), "danger"),
                *show_all,
            )))
        elif rep.approvable:
            parts.append(Buttons((
                Button("Approve", APPROVE, ticket.encode(), "primary"),
                Button("Reject", REJECT, ticket.encode(), "danger"),
                *show_all,
            )))
        else:
            names = ", ".join(c.name for c in rep.blocking)
            parts.append(Note(f"Approval is blocked by {names}: fix the cause and re-run the checks, or reject."))
            parts.append(Buttons((
                Button("Re-run checks", RECHECK, ticket.encode()),
                Button("Reject", REJECT, ticket.encode(), "danger"),
                *show_all,
            )))
    return tuple(parts)


def all_checks_parts(report: Mapping[str, Any] | GateReport, deployment_id: int,
                     actors: Collection[str]) -> tuple[Part, ...]:
    """Every check of a report, the worst first: the answer to "Show all checks"."""
    rep = _report(report)
    lines = check_lines(rep, actors=actors)
    return (Text(f"*{rep.gate.capitalize()} gate · deployment #{deployment_id}* — all {len(lines)} checks:\n"
                 + "\n".join(lines)),)


def report_tables(report: GateReport) -> list[Part]:
    """The compact tables of a model gate (beside production, when there is a baseline) or a traffic gate (and the
    mix its sweep replayed)."""
    attachments = report.attachments or {}
    if report.gate == "model":
        evaluation = attachments.get("evaluation") or {}
        if not evaluation.get("production"):
            return []
        headers, rows = model_comparison(evaluation)
        release = evaluation["production"].get("release") or "the live release"
        return [Table(f"*Compared with production ({release}):*", text_table(headers, rows))]
    if report.gate == "traffic":
        levels = (attachments.get("sweep") or {}).get("levels") or []
        if not levels:
            return []
        # What the sweep replayed beside production's mix, under the table it measured: a passing check, which the
        # count of passed checks would otherwise hide from the approver deciding on these numbers.
        mix = [Text(f"*Mix* {literal(c.reason)}") for c in report.checks if c.name == "traffic.mix"]
        return [Table("*Sweep* (ms; 429 = rejected requests):", sweep_table(levels, SWEEP_COMPACT_COLUMNS), what="levels"),
                *mix]
    return []


def accepted_note(acceptance: LimitsAcceptance) -> Note:
    prev = acceptance.previous
    return Note(f"{Icon.PASS} Limits accepted by {person(acceptance.accepted_by)} "
                f"at {acceptance.accepted_at:%Y-%m-%d %H:%M} UTC: "
                f"{limits_words(acceptance.accepted)} (was {prev.get('max_concurrent_requests')} / "
                f"{prev.get('max_queue_size')}); "
                + (f"applied to the running release (manifest {acceptance.applied_sha256[:12]})" if acceptance.applied_sha256
                   else "the next rendered manifest uses them"))


def limits_parts(
    report: Mapping[str, Any] | GateReport,
    *,
    effective: Mapping[str, Any],
    acceptance: LimitsAcceptance | None,
    ticket: GateTicket | None,
    undecided: bool = False,
) -> tuple[Part, ...]:
    """Under a traffic report: who accepted its proposal, or the Accept button while it differs from ``effective``.

    ``ticket`` is ``None`` where the proposal may no longer be accepted (an older report, a deployment that ended).
    While the gate is ``undecided`` and ``effective`` admits more than the report measured safe, the gate's own
    buttons (:func:`gate_parts` with ``above_limits``) approve with the proposal or above it; this part says why.
    """
    if acceptance is not None:
        return (accepted_note(acceptance),)
    proposal = proposed_limits(report)
    if proposal is None or ticket is None:
        return ()
    if same_limits(proposal, effective):
        return (Note(f"The endpoint already runs with the proposed limits ({limits_words(proposal)})."),)
    above = limits_above(proposal, effective)
    buttons = (Button("Accept proposed limits", ACCEPT_LIMITS, ticket.encode()),)
    return (
        Text(f"*Proposed limits:* {limits_words(proposal)} — the endpoint now admits "
             f"{effective.get('max_concurrent_requests')} concurrent, queue {effective.get('max_queue_size')}."
             + ("\nApproving as it stands goes live above the measured safe concurrency: accept the limits and "
                "approve, or approve above the limits and say why." if above is not None and undecided else "")),
        Buttons(buttons),
    )


def waiting_for(endpoint: EndpointSettings, requested_by: str) -> str:
    """Who may decide a waiting gate, said once in its message: the approvers' group mentioned, the requester told."""
    approvers = f"<!subteam^{endpoint.approver_group}>" if endpoint.approver_group else "someone with the approver role"
    own = (" (not you: someone else must approve on this endpoint)" if endpoint.requires_separate_approver else "")
    return f"Waiting for {approvers} to approve or reject. {person(requested_by)}: they can decide{own}."


def decided_note(decision: str, decided_by: str, decided_at: dt.datetime, reason: str | None) -> Note:
    verb = f"{Icon.PASS} Approved" if decision == "approved" else f"{Icon.REJECTED} Rejected"
    why = f" — {literal(reason)}" if reason else ""
    return Note(f"{verb} by {person(decided_by)} at {decided_at:%Y-%m-%d %H:%M} UTC{why}")
