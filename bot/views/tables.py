"""The rows of the model and traffic gate tables, shared by the CLI text and the chat messages.

One piece of code for the CLI (:mod:`bot.views.gate_text`) and the gate messages
(:mod:`bot.views.gates`): the rows below are what both print; each front end only
chooses the columns and the frame.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any


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


def model_comparison(evaluation: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
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


SWEEP_COLUMNS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
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
# What fits a chat message beside the checks; the CLI prints every column.
SWEEP_COMPACT_COLUMNS = ("prefix", "conc", "429", "TTFT p99", "done p99", "objectives")


def sweep_table(levels: Sequence[Mapping[str, Any]], columns: Sequence[str] = tuple(SWEEP_COLUMNS)) -> str:
    """The sweep's levels, per prefix mode then concurrency, in the chosen columns."""
    ordered = sorted(levels, key=lambda lv: (lv["prefix"], lv["concurrency"]))
    return text_table(list(columns), [[SWEEP_COLUMNS[c](lv) for c in columns] for lv in ordered])
