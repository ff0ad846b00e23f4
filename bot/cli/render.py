"""Plain-text renderings of deployments and gate reports, for the CLI and the local shell."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from bot.domain.chat_text import unmarked
from bot.domain.checks import GateReport
from bot.domain.read_models import DeploymentView

if TYPE_CHECKING:
    from bot.services.engine.recovery import Resumption

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
        + (f" ({unmarked(view.state_reason)})" if view.state_reason else ""),
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


def resumption_lines(done: Resumption, now: dt.datetime) -> list[str]:
    """What ``kimi-ops resume`` did with one in-flight deployment, then the deployment as it stands."""
    view = done.view
    if done.taken:
        said = f"took deployment #{view.id} over"
    elif done.waits_for_person:
        said = f"left deployment #{view.id}: it waits for a person at {view.state.words}; nothing to resume"
    elif done.driven_until is not None and done.driven_until > now:
        left = (done.driven_until - now).total_seconds()
        said = (f"left deployment #{view.id}: it is driven by {done.driven_by} until {done.driven_until:%H:%M:%S} UTC; "
                f"it lapses in {left:.0f} s unless renewed (`kimi-ops resume` again then)")
    else:
        said = (f"left deployment #{view.id}: another process claimed it a moment ago "
                f"({done.driven_by or 'its holder is unknown'}); `kimi-ops resume` again if it stalls")
    return [said, *deployment_lines(view)]
