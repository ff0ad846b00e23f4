"""Compact text tables of the model and traffic gate reports, for the CLI and Slack code blocks.

Both functions take a :class:`GateReport` or the JSON dict stored for one, and
read only the attachments the gates wrote; a missing part prints as ``n/a``.
The rows come from :mod:`bot.views.tables`, which the Slack gate messages
use too, so a terminal and a channel show the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.domain.checks import GateReport
from bot.views.tables import model_comparison, sweep_table, text_table

MARK = {"pass": "ok", "warn": "WARN", "fail": "FAIL", "error": "ERROR"}


def _as_dict(report: GateReport | dict[str, Any]) -> dict[str, Any]:
    return report.model_dump(mode="json") if isinstance(report, GateReport) else report


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A left-aligned plain-text table (monospace); the same code frames the Slack tables."""
    return text_table(headers, rows)


def _checks(data: dict[str, Any]) -> str:
    return "\n".join(f"[{MARK.get(c['status'], c['status'])}] {c['name']}: {c['reason']}" for c in data.get("checks", []))


def render_model_report(report: GateReport | dict[str, Any]) -> str:
    """Pass rate per kind and latency beside production, the failed cases, then the checks."""
    data = _as_dict(report)
    evaluation = (data.get("attachments") or {}).get("evaluation") or {}
    out = [f"model gate: {evaluation.get('release', '?')} — set {evaluation.get('set', '?')} v{evaluation.get('version', '?')}"]
    if data.get("summary"):
        out.append(data["summary"])
    headers, rows = model_comparison(evaluation)
    out += ["", table(headers, rows)]
    failed = [c for c in evaluation.get("cases", []) if not c.get("passed")]
    if failed:
        out += ["", "failed cases:"]
        out += [f"  {c['case']} ({c['kind']}): {'; '.join(c.get('failures', []))}" for c in failed]
    out += ["", _checks(data)]
    return "\n".join(out).rstrip()


def render_traffic_report(report: GateReport | dict[str, Any]) -> str:
    """The sweep table per prefix mode, the knee and the proposed limits, then the checks."""
    data = _as_dict(report)
    att = data.get("attachments") or {}
    sweep = att.get("sweep") or {}
    proposal = att.get("proposal") or {}
    knee = att.get("knee") or {}
    current = att.get("current_limits") or {}
    out = [f"traffic gate: {sweep.get('requests', 0)} requests in {sweep.get('elapsed_seconds', 0)} s"
           + (f" (stopped early: {sweep['stopped_early']})" if sweep.get("stopped_early") else "")]
    if sweep.get("levels"):
        out += ["", sweep_table(sweep["levels"])]
    if knee.get("concurrency") is not None:
        out.append(f"\nknee: {knee['concurrency']} concurrent ({knee.get('prefix')} prefixes) — "
                   f"{'; '.join(knee.get('broken', []))}")
    else:
        out.append("\nknee: none found up to the ceiling")
    if proposal.get("max_concurrent_requests") is not None:
        out.append(f"proposed: maxConcurrentRequests {proposal['max_concurrent_requests']}, "
                   f"maxQueueSize {proposal['max_queue_size']}, overflow {proposal.get('overflow_status_code')} "
                   f"(now {current.get('max_concurrent_requests')}/{current.get('max_queue_size')})")
    else:
        out.append("proposed: nothing (no level met the objectives)")
    out += ["", _checks(data)]
    return "\n".join(out).rstrip()
