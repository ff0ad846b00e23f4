"""One reason form for every button that asks why: open it, refuse a blank or lost one in the acknowledgement, act.

Reject (a gate), Approve above the measured limits (a traffic gate) and Silence… (a watch alert) each open a
modal built by ``bot.adapters.slack.blocks`` whose ``private_metadata`` carries the clicked button's ticket,
channel and message. A :class:`ReasonForm` names the form and its sentences; :func:`open_form` opens it for
the clicker (a trigger lives 3 seconds: when Slack refuses, the clicker is told nothing happened), and
:func:`register_form` acknowledges a submission only with its ticket and a reason, then hands both to the
form's action on the lazy pool.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slack_bolt import Ack, App
from slack_sdk.errors import SlackApiError

from bot.logs import logger_for
from bot.slack.answers import Tell, clicker, guard
from bot.slack.deps import SlackDeps
from bot.views.parts import Reply, reply

log = logger_for(__name__)


def dig(value: Any, key: str) -> Any:
    """``value[key]`` when ``value`` is a dict, else None (Slack's payloads are read without trusting their shape)."""
    return value.get(key) if isinstance(value, dict) else None


def reason(view: dict[str, Any]) -> str:
    """The reason typed into the form; empty when the form came back without it (no ``state``, or not as we sent it)."""
    typed = dig(dig(dig(dig(view.get("state"), "values"), "reason"), "reason"), "value")
    return typed.strip() if isinstance(typed, str) else ""


def metadata(view: dict[str, Any]) -> dict[str, Any] | None:
    """What the form carried from the click (the ticket, channel, message); None when it is not what we wrote."""
    try:
        meta = json.loads(view.get("private_metadata") or "")
    except (TypeError, ValueError):
        return None
    return meta if isinstance(meta, dict) and isinstance(meta.get("ticket"), str) else None


@dataclass(frozen=True)
class ReasonForm:
    """A reason modal: its ``callback_id`` and what it says when lost, left blank or not opened."""

    callback_id: str
    lost: str  # the form no longer carries its ticket
    blank: str  # submitted without a reason
    undone: str  # what did not happen when Slack could not open the form ("rejected")
    again: str  # how to try again ("Click Reject again.")


# What a submission asks of the form's action: the submitter, the carried metadata, the reason, the whole view.
Act = Callable[[str, dict[str, Any], str, dict[str, Any]], Reply | None]


def open_form(deps: SlackDeps, form: ReasonForm, trigger_id: str, view: dict[str, Any], tell: Tell) -> None:
    try:
        deps.client.views_open(trigger_id=trigger_id, view=view)
    except SlackApiError as exc:
        log.warning("views.open failed for %s: %s", form.callback_id, exc.response.get("error"))
        tell(reply(f"Slack could not open the reason form ({exc.response.get('error')}); nothing was {form.undone}. "
                   f"{form.again}"))


def register_form(app: App, deps: SlackDeps, form: ReasonForm, act: Act) -> None:
    """Answer ``form``'s submissions: refused in the acknowledgement without a ticket or reason, else ``act``."""

    def acknowledge(ack: Ack, view: dict[str, Any]) -> None:
        if metadata(view) is None:
            ack(response_action="errors", errors={"reason": form.lost})
        elif not reason(view):
            ack(response_action="errors", errors={"reason": form.blank})
        else:
            ack()

    def submitted(body: dict[str, Any], view: dict[str, Any]) -> None:
        why, meta = reason(view), metadata(view)
        if not why or meta is None:
            return  # refused in the acknowledgement
        channel = meta.get("channel") if isinstance(meta.get("channel"), str) else None
        user = body["user"]["id"]
        tell = clicker(deps.client, user, channel, None)
        answer = guard(lambda: act(user, meta, why, view), tell)
        deps.follow(answer, tell, channel)

    app.view(form.callback_id)(ack=acknowledge, lazy=[submitted])
