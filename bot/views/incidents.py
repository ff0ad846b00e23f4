"""How a metrics-watch incident reads in the chat: the alert with what the endpoint runs, and its buttons.

Acknowledge, Silence (a form asks for how long and why) and Roll back (to the release the live one replaced;
the rollback rules apply to whoever clicks). Each button carries the incident's id.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from bot.domain.chat_text import literal
from bot.views.actions import INCIDENT_ACK, INCIDENT_ROLLBACK, INCIDENT_SILENCE
from bot.views.parts import Button, Buttons, Note, Part, Text, person


def _context_line(context: Mapping[str, Any]) -> str:
    live = context.get("live_release")
    parts = [f"live: *{live}*" if live else "no live release"]
    last = context.get("last_deployment")
    if isinstance(last, Mapping):
        change = f"{last.get('replaces')} → {last.get('release')}" if last.get("replaces") else str(last.get("release"))
        parts.append(f"last deployment #{last.get('id')} ({last.get('kind')}, {str(last.get('state')).replace('_', ' ')}): "
                     f"{change}, {str(last.get('at', ''))[:16].replace('T', ' ')} UTC")
        if last.get("channel") and last.get("thread_ts"):  # Slack's permalink form of a message
            parts.append(f"<https://slack.com/archives/{last['channel']}/p{str(last['thread_ts']).replace('.', '')}|its thread>")
    return " · ".join(parts)


def alert_parts(text: str, incident_id: int, context: Mapping[str, Any], *, acknowledged_by: str | None = None,
                silenced_by: str | None = None, silenced_until: dt.datetime | None = None,
                silence_reason: str | None = None, closed: bool = False) -> list[Part]:
    parts: list[Part] = [Text(text), Note(_context_line(context))]
    if acknowledged_by:
        parts.append(Note(f":eyes: acknowledged by {person(acknowledged_by)}"))
    if silenced_by and silenced_until:
        parts.append(Note(f":no_bell: silenced by {person(silenced_by)} until "
                          f"{silenced_until.strftime('%Y-%m-%d %H:%M')} UTC: {literal(silence_reason or '')}"))
    if closed:
        parts.append(Note(":large_green_circle: recovered"))
        return parts
    buttons = [Button("Acknowledge", INCIDENT_ACK, str(incident_id), style="primary")] if not acknowledged_by else []
    buttons.append(Button("Silence…", INCIDENT_SILENCE, str(incident_id)))
    if context.get("last_deployment") and context.get("live_release"):
        buttons.append(Button("Roll back", INCIDENT_ROLLBACK, str(incident_id), style="danger"))
    parts.append(Buttons(tuple(buttons)))
    return parts
