"""The App Home tab: opening it remembers the person on this replica and publishes their Home."""

from __future__ import annotations

from typing import Any

from slack_bolt import App

from bot.slack.deps import SlackDeps
from bot.slack.listeners.acks import ack_now


def register(app: App, deps: SlackDeps) -> None:
    def home_opened(event: dict[str, Any]) -> None:
        user = event.get("user")
        if event.get("tab", "home") != "home" or not isinstance(user, str) or not user:
            return  # another tab, or an event naming nobody: there is no Home to show
        deps.homes.opened(user)

    app.event("app_home_opened")(ack=ack_now, lazy=[home_opened])
