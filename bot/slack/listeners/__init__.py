"""The Slack app's listeners, one module per concern, each with ``register(app, deps)``; the catch-alls last."""

from __future__ import annotations

from slack_bolt import App

from bot.slack.deps import SlackDeps
from bot.slack.listeners import command_forms, commands, errors, gate_actions, home, incident_actions, unhandled


def register_listeners(app: App, deps: SlackDeps, command: str) -> None:
    commands.register(app, deps, command)
    command_forms.register(app, deps)
    gate_actions.register(app, deps)
    incident_actions.register(app, deps)
    home.register(app, deps)
    unhandled.register(app, deps)  # last: only what no listener above took
    errors.register(app)
