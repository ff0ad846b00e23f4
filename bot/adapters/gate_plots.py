"""A gate report's plot, drawn from the numbers stored in the report, after the report is posted.

The model and traffic gates store their numbers in the report's attachments (pass rates and latencies per
kind beside the replaced release's, the tolerance; the sweep's levels, objectives, knee and proposal, the mix
replayed). Nothing is drawn while the gate runs: users are closed out then, and a plot (half a second, and a
second more for matplotlib's first import in a process) would only delay the report. The Slack notifier draws
the PNG here when it delivers the report's ``gate.plot`` event, after the gate message is posted.

An approval is bound to the report's hash, and the PNG is not part of the report: the plot is derived from the
stored numbers, so being bound to the numbers is being bound to what the plot shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.adapters.plots import evaluation_figure, png_bytes, sweep_figure


def plottable(report: Mapping[str, Any]) -> bool:
    """Whether ``report`` (a stored gate report) holds numbers a plot is drawn from."""
    attachments = report.get("attachments") or {}
    if report.get("gate") == "model":
        return bool(((attachments.get("evaluation") or {}).get("summary") or {}).get("kinds"))
    if report.get("gate") == "traffic":
        return bool((attachments.get("sweep") or {}).get("levels"))
    return False


def gate_figure(report: Mapping[str, Any], *, endpoint: str, release: str) -> Any | None:
    """The figure of a stored model or traffic report (None for a report without numbers to draw)."""
    if not plottable(report):
        return None
    attachments = report.get("attachments") or {}
    if report.get("gate") == "model":
        return _evaluation(attachments["evaluation"], endpoint, release)
    sweep, knee = attachments["sweep"], attachments.get("knee") or {}
    proposal = (attachments.get("proposal") or {}).get("max_concurrent_requests")
    mix = (attachments.get("mix") or {}).get("words") or ()
    return sweep_figure(sweep["levels"], knee.get("concurrency"), proposal,
                        f"Traffic gate · {release} on {endpoint}: latency and rejections",
                        knee_reasons=knee.get("broken") or (), objectives=sweep.get("objectives"), mix=mix)


def gate_png(report: Mapping[str, Any], *, endpoint: str, release: str) -> bytes | None:
    """The PNG of :func:`gate_figure` (None for a report without numbers to draw)."""
    figure = gate_figure(report, endpoint=endpoint, release=release)
    return None if figure is None else png_bytes(figure)


def _evaluation(evaluation: Mapping[str, Any], endpoint: str, release: str) -> Any:
    summary = evaluation["summary"]
    production = evaluation.get("production") or {}
    before = production.get("summary")
    kinds = sorted(summary["kinds"])

    def counts(of: Mapping[str, Any], kind: str) -> tuple[int, int]:
        row = of["kinds"].get(kind) or {}
        return int(row.get("passed") or 0), int(row.get("total") or 0)

    latency = {"this release": (summary.get("latency_p50_ms"), summary.get("latency_p95_ms"))}
    if before:
        latency["production"] = (before.get("latency_p50_ms"), before.get("latency_p95_ms"))
    return evaluation_figure(
        kinds, [counts(summary, k) for k in kinds], [counts(before, k) for k in kinds] if before else None,
        f"Model gate · {evaluation.get('release') or release} on {endpoint}", latency=latency,
        replaced=production.get("release"), tolerance=evaluation.get("tolerance"))
