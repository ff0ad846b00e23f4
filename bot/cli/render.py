"""Plain-text renderings of deployments and gate reports, for the CLI and the local shell."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from bot.domain.checks import GateReport
from bot.domain.read_models import DeploymentView

STATUS_MARK = {"pass": "PASS ", "warn": "WARN ", "fail": "FAIL ", "error": "ERROR"}


def report_lines(report: dict[str, Any] | GateReport) -> list[str]:
    rep = report if isinstance(report, GateReport) else GateReport.model_validate(report)
    lines = [f"{rep.gate} gate checks: {rep.status}" + (f" — {rep.summary}" if rep.summary else "")]
    lines += [f"  {STATUS_MARK[c.status]} {c.name}: {c.reason}" for c in rep.checks]
    return lines


def _took(delta: dt.timedelta | None) -> str:
    if delta is None:
        return ""
    minutes = delta.total_seconds() / 60
    return f"{minutes:.0f} min" if minutes >= 1 else f"{delta.total_seconds():.0f} s"


def deployment_lines(view: DeploymentView) -> list[str]:
    lines = [
        f"deployment #{view.id}: {view.kind} of {view.release} to {view.endpoint} — {view.state.words}"
        + (f" ({view.state_reason})" if view.state_reason else ""),
    ]
    for g in view.gates:
        decided = f"{g.decision} by {g.decided_by} at {g.decided_at:%H:%M} UTC" if g.decision else "waiting"
        lines.append(f"  {g.gate} gate: checks {g.status}, {decided}" + (f" — {g.reason}" if g.reason else ""))
    if view.pending is not None:
        lines += ["", *report_lines(view.pending.report)]
        if view.pending.approvable:
            lines.append(f"  → approve: kimi-ops gate approve {view.id} {view.pending.gate} --as <approver>")
        else:
            lines.append(f"  → blocked: reject it or run `kimi-ops gate recheck {view.id} {view.pending.gate}`")
    if view.rollback_offered:
        lines.append(f"  → rollback offered: kimi-ops rollback {view.endpoint}")
    return lines


def history_rows(views: Iterable[DeploymentView]) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for v in views:
        gates = ", ".join(f"{g.gate[:5]}:{g.decided_by or '-'}" for g in v.gates)
        started = f"{v.created_at:%Y-%m-%d %H:%M}"
        rows.append((v.id, v.kind, v.release, v.state.value, v.requested_by, gates, started, _took(v.duration),
                     v.state_reason or ""))
    return rows
