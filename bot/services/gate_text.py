"""Compact text tables of the model and traffic gate reports, for the CLI and Slack code blocks.

Both functions take a :class:`GateReport` or the JSON dict stored for one, and
read only the attachments the gates wrote; a missing part prints as ``n/a``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.domain.checks import GateReport

MARK = {"pass": "ok", "warn": "WARN", "fail": "FAIL", "error": "ERROR"}


def _as_dict(report: GateReport | dict[str, Any]) -> dict[str, Any]:
    return report.model_dump(mode="json") if isinstance(report, GateReport) else report


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A left-aligned plain-text table (monospace)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _checks(data: dict[str, Any]) -> str:
    return "\n".join(f"[{MARK.get(c['status'], c['status'])}] {c['name']}: {c['reason']}" for c in data.get("checks", []))


def render_model_report(report: GateReport | dict[str, Any]) -> str:
    """Pass rate per kind and latency beside production, the failed cases, then the checks."""
    data = _as_dict(report)
    evaluation = (data.get("attachments") or {}).get("evaluation") or {}
    summary = evaluation.get("summary") or {}
    production = (evaluation.get("production") or {}).get("summary") or {}
    prod_release = (evaluation.get("production") or {}).get("release")
    out = [f"model gate: {evaluation.get('release', '?')} — set {evaluation.get('set', '?')} v{evaluation.get('version', '?')}"]
    if data.get("summary"):
        out.append(data["summary"])
    kinds = sorted(set(summary.get("kinds", {})) | set(production.get("kinds", {})))
    rows = []
    for kind in kinds:
        now = summary.get("kinds", {}).get(kind)
        before = production.get("kinds", {}).get(kind)
        rows.append([kind, f"{now['passed']}/{now['total']}" if now else None, _pct(now["pass_rate"]) if now else None,
                     _pct(before["pass_rate"]) if before else None])
    for label, key in (("latency p50 ms", "latency_p50_ms"), ("latency p95 ms", "latency_p95_ms"), ("TTFT p50 ms", "ttft_p50_ms"), ("TTFT p95 ms", "ttft_p95_ms")):
        rows.append([label, "", summary.get(key), production.get(key)])
    if rows:
        out += ["", table(["kind", "passed", "this release", f"production {prod_release or ''}".strip()], rows)]
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
    rows = []
    for lv in sorted(sweep.get("levels", []), key=lambda lv: (lv["prefix"], lv["concurrency"])):
        rows.append([lv["prefix"], lv["concurrency"], lv["requests"], lv["rejected"], lv.get("errors"),
                     lv.get("ttft_p50_ms"), lv.get("ttft_p99_ms"), lv.get("completion_p99_ms"),
                     None if lv.get("queue_depth") is None else int(lv["queue_depth"]),
                     _pct(lv.get("kv_cache_usage")), _pct(lv.get("prefix_cache_hit_rate")),
                     "; ".join(lv.get("broken", [])) or "ok"])
    if rows:
        out += ["", table(["prefix", "conc", "reqs", "429", "err", "TTFT p50", "TTFT p99", "done p99", "queue", "KV", "hit", "objectives"], rows)]
    if knee.get("concurrency") is not None:
        out.append(f"\nknee: {knee['concurrency']} concurrent ({knee.get('prefix')} prefixes) — {'; '.join(knee.get('broken', []))}")
    else:
        out.append("\nknee: none found up to the ceiling")
    if proposal.get("max_concurrent_requests") is not None:
        out.append(f"proposed: maxConcurrentRequests {proposal['max_concurrent_requests']}, maxQueueSize {proposal['max_queue_size']}, "
                   f"overflow {proposal.get('overflow_status_code')} (now {current.get('max_concurrent_requests')}/{current.get('max_queue_size')})")
    else:
        out.append("proposed: nothing (no level met the objectives)")
    if att.get("plot", {}).get("path"):
        out.append(f"plot: {att['plot']['path']}")
    out += ["", _checks(data)]
    return "\n".join(out).rstrip()
