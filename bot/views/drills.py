"""How ``/kimi drills`` and ``kimi-ops drills`` show an endpoint's last availability drills."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from bot.domain.drills import KINDS, DrillView, seconds
from bot.views.parts import Heading, Note, Part, Table, Text
from bot.views.tables import text_table

HEADER = ["#", "kind", "state", "asked", "by", "approved by", "detected", "recovered", "alerts"]


def _after(value: float | None) -> str:
    return seconds(dt.timedelta(seconds=value)) if value is not None else "-"


def drill_rows(drills: Sequence[DrillView]) -> list[list[str]]:
    return [[str(d.id), d.kind, d.state, f"{d.requested_at:%Y-%m-%d %H:%M}", d.requested_by, d.decided_by or "-",
             _after(d.detection_seconds), _after(d.recovery_seconds), ", ".join(d.alerts) or "-"] for d in drills]


def drill_parts(endpoint: str, drills: Sequence[DrillView]) -> list[Part]:
    parts: list[Part] = [Heading(f"{endpoint}: last availability drills")]
    if not drills:
        parts.append(Text(f"No drill yet. `/kimi drill {endpoint} KIND` asks for one; an approver other than you "
                          "approves it."))
        return parts
    parts.append(Table("detected and recovered: time from the fault's injection", text_table(HEADER, drill_rows(drills)),
                       what="drills"))
    parts.extend(Text(d.line) for d in drills[:3])
    parts.append(Note("kinds: " + ", ".join(KINDS)))
    return parts
