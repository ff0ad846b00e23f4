"""The App Home tab: opening it remembers the person on this replica's worker and publishes their Home."""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App, BoltContext

from bot.slack.deps import SlackDeps
from bot.slack.intake import Intake
from bot.slack.job import Job
from bot.slack.listeners.acks import Handler
from bot.slack.middleware.replay_guard import KEY


def register(app: App, intake: Intake) -> None:
    def home_opened(ack: Ack, event: dict[str, Any], context: BoltContext) -> None:
        user = event.get("user")
        if event.get("tab", "home") != "home" or not isinstance(user, str) or not user:
            ack()  # another tab, or an event naming nobody: there is no Home to show
            return
        intake.submit(Job("home_opened", str(context[KEY]), user), ack)

    app.event("app_home_opened")(home_opened)


def publish_home(deps: SlackDeps, job: Job) -> None:
    deps.homes.opened(job.actor)


HANDLERS: dict[str, Handler] = {"home_opened": publish_home}
