"""The Slack app's listeners, one module per concern, each with ``register(app, …)``; the catch-alls last.

A listener acknowledges and hands a typed job on (:mod:`bot.slack.listeners.acks`); each module's ``HANDLERS``
run those jobs, gathered by :mod:`bot.slack.handlers`.
"""

from __future__ import annotations

from slack_bolt import App

from bot.slack.deps import SlackDeps
from bot.slack.intake import Intake
from bot.slack.listeners import command_forms, commands, errors, gate_actions, home, incident_actions, unhandled


def register_listeners(app: App, deps: SlackDeps, intake: Intake, command: str) -> None:
    commands.register(app, deps, intake, command)
    command_forms.register(app, deps, intake)
    gate_actions.register(app, intake)
    incident_actions.register(app, intake)
    home.register(app, intake)
    unhandled.register(app, intake)  # last: only what no listener above took
    errors.register(app)
