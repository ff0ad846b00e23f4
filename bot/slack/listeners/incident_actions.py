"""The metrics-watch alert buttons: Acknowledge, Silence… (a form: how long and why) and Roll back.

Each click is acknowledged at once; the lazy function resolves the clicker and calls :mod:`commands.incidents`,
whose services authorise and audit. A silence submitted without a reason is refused in the acknowledgement.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt import Ack, App, Respond
from slack_sdk.errors import SlackApiError

from bot.adapters.slack.blocks import SILENCE_MODAL, silence_modal
from bot.services.incidents import SILENCE_CHOICES_HOURS
from bot.slack.answers import clicker, guard
from bot.slack.deps import SlackDeps
from bot.slack.listeners.acks import ack_now
from bot.slack.listeners.gate_actions import _field, click, metadata, reason
from bot.views.actions import INCIDENT_ACK, INCIDENT_ROLLBACK, INCIDENT_SILENCE
from bot.views.parts import reply
from commands import incidents

log = logging.getLogger("kimi_ops.slack")


def hours(view: dict[str, Any]) -> str | None:
    """The chosen duration: a select's ``selected_option`` (or a typed ``value``, as a plain input sends it)."""
    field = _field(_field(_field(view.get("state"), "values"), "hours"), "hours")
    chosen = _field(_field(field, "selected_option"), "value") or _field(field, "value")
    return chosen if isinstance(chosen, str) else None


def register(app: App, deps: SlackDeps) -> None:
    def acknowledge(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        answer = guard(lambda: incidents.acknowledge(deps.ctx, deps.identity(user), value), tell)
        deps.follow(answer, tell, channel)

    def roll_back(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        answer = guard(lambda: incidents.roll_back(deps.root, deps.identity(user), value), tell)
        deps.follow(answer, tell, channel)

    def ask_silence(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        message_ts = (body.get("container") or {}).get("message_ts")
        number = guard(lambda: incidents.incident_id(value), tell)
        if number is None:
            return
        try:
            deps.client.views_open(trigger_id=body["trigger_id"],
                                   view=silence_modal(number, f"incident #{number}", channel, message_ts,
                                                      SILENCE_CHOICES_HOURS))
        except SlackApiError as exc:
            log.warning("views.open failed for a Silence click: %s", exc.response.get("error"))
            tell(reply(f"Slack could not open the silence form ({exc.response.get('error')}); nothing was silenced. "
                       "Click Silence again."))

    def ack_silence(ack: Ack, view: dict[str, Any]) -> None:
        if metadata(view) is None:
            ack(response_action="errors", errors={"reason": "This form no longer says which alert it silences; "
                                                            "close it and click Silence again."})
        elif not reason(view):
            ack(response_action="errors", errors={"reason": "Say why the alert is silenced."})
        else:
            ack()

    def silence(body: dict[str, Any], view: dict[str, Any]) -> None:
        why, meta = reason(view), metadata(view)
        if not why or meta is None:
            return  # refused in the acknowledgement
        channel = meta.get("channel") if isinstance(meta.get("channel"), str) else None
        user = body["user"]["id"]
        tell = clicker(deps.client, user, channel, None)
        answer = guard(lambda: incidents.silence(deps.ctx, deps.identity(user), meta.get("ticket"), hours(view), why), tell)
        deps.follow(answer, tell, channel)

    app.action(INCIDENT_ACK)(ack=ack_now, lazy=[acknowledge])
    app.action(INCIDENT_ROLLBACK)(ack=ack_now, lazy=[roll_back])
    app.action(INCIDENT_SILENCE)(ack=ack_now, lazy=[ask_silence])
    app.view(SILENCE_MODAL)(ack=ack_silence, lazy=[silence])
