"""The metrics-watch alert buttons: Acknowledge, Silence… (a form: how long and why) and Roll back.

Each click is acknowledged at once; the lazy function resolves the clicker and calls :mod:`commands.incidents`,
whose services authorise and audit. A silence submitted without a reason is refused in the acknowledgement (the shared
:mod:`bot.slack.listeners.reason_modal`).
"""

from __future__ import annotations

from typing import Any

from slack_bolt import App, Respond

from bot.adapters.slack.blocks import SILENCE_MODAL, silence_modal
from bot.services.incidents import SILENCE_CHOICES_HOURS
from bot.slack.answers import clicker, guard
from bot.slack.deps import SlackDeps
from bot.slack.listeners.acks import ack_now
from bot.slack.listeners.gate_actions import click
from bot.slack.listeners.reason_modal import ReasonForm, dig, open_form, register_form
from bot.views.actions import INCIDENT_ACK, INCIDENT_ROLLBACK, INCIDENT_SILENCE
from bot.views.parts import Reply
from commands import incidents

SILENCE_FORM = ReasonForm(
    SILENCE_MODAL, lost="This form no longer says which alert it silences; close it and click Silence again.",
    blank="Say why the alert is silenced.", undone="silenced", again="Click Silence again.")


def hours(view: dict[str, Any]) -> str | None:
    """The chosen duration: a select's ``selected_option`` (or a typed ``value``, as a plain input sends it)."""
    picked = dig(dig(dig(view.get("state"), "values"), "hours"), "hours")
    chosen = dig(dig(picked, "selected_option"), "value") or dig(picked, "value")
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
        open_form(deps, SILENCE_FORM, body["trigger_id"],
                  silence_modal(number, f"incident #{number}", channel, message_ts, SILENCE_CHOICES_HOURS), tell)

    def silence(user: str, meta: dict[str, Any], why: str, view: dict[str, Any]) -> Reply:
        return incidents.silence(deps.ctx, deps.identity(user), meta.get("ticket"), hours(view), why)

    app.action(INCIDENT_ACK)(ack=ack_now, lazy=[acknowledge])
    app.action(INCIDENT_ROLLBACK)(ack=ack_now, lazy=[roll_back])
    app.action(INCIDENT_SILENCE)(ack=ack_now, lazy=[ask_silence])
    register_form(app, deps, SILENCE_FORM, silence)
