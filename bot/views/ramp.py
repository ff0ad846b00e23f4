"""The ramp's one live message: the current split between the route's backends, each side's last soak window,
and when the next step comes (chat-neutral text; the notifier edits it in place)."""

from __future__ import annotations

from typing import Any

from bot.domain.events import RampSplit
from bot.domain.read_models import RolledBack
from bot.views.actions import RUN_COMMAND
from bot.views.parts import Button, Buttons, Part, Text


def _side(side: dict[str, Any]) -> str:
    cohort = " + internal cohort" if side.get("cohort") else ""
    head = f"{side.get('name')}: {side.get('weight', 0)}%{cohort}"
    requests = side.get("requests")
    if requests is None:
        return head
    if not requests:
        return f"{head} — no user requests in the last soak"
    ttft = side.get("ttft_p99_ms")
    p99 = f"TTFT p99 {ttft:.0f} ms, " if isinstance(ttft, (int, float)) else ""
    return f"{head} — {p99}errors {float(side.get('error_rate') or 0):.1%} of {requests:.0f} requests"


def ramp_text(event: RampSplit) -> str:
    """``Ramp at 25%`` with one line per side and the next step (or how it ended)."""
    lines = [f":bar_chart: *Ramp at {event.step}*"] + [f"• {_side(side)}" for side in event.sides]
    if event.outcome == "live":
        lines.append("Done: the ramp is complete.")
    elif event.outcome:
        lines.append(f"Aborted: {event.outcome}")
    elif event.next_step is not None and event.next_at is not None:
        lines.append(f"Next: {event.next_step} at {event.next_at:%H:%M:%S} UTC, if the objectives hold.")
    elif event.next_at is not None:
        lines.append(f"Soaking until {event.next_at:%H:%M:%S} UTC.")
    return "\n".join(lines)


def ramp_parts(event: RampSplit, service: str | None) -> list[Part]:
    """The ramp message; once a pair's ramp is done, with the one-click fast path back (``rollback SERVICE``)."""
    parts: list[Part] = [Text(ramp_text(event))]
    if service is not None and event.outcome == "live":
        parts.append(Text(f"Fast path back: `/kimi rollback {service}` (one route change to the side kept warm)."))
        parts.append(Buttons((Button(f"Roll back {service}", RUN_COMMAND, f"rollback {service}", style="danger"),)))
    return parts


def service_rolled_back(done: RolledBack, *, bold: bool = True) -> str:
    """The answer to a service's rollback, for the chat (names in bold) or a terminal (``bold=False``)."""
    mark = "*" if bold else ""
    return (f"{mark}{done.service}{mark} rolled back to {mark}{done.to_side}{mark} ({done.release}) in one route "
            f"change: {done.users_get}. {done.from_side} keeps its release with no users.")
