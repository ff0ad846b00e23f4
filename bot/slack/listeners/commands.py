"""The slash command (``/kimi …``): parsed once in the acknowledgement, run after it.

The ack function parses the text (pure, microseconds) and either answers the
usage line or stores the :class:`commands.registry.Parsed` value in Bolt's
request context, which Bolt copies to the lazy function; the lazy function
resolves the person, runs the command module with those parsed arguments and
follows up. Nothing parses the text a second time.
"""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App, BoltContext, Respond

from bot.slack.answers import guard, responder
from bot.slack.deps import SlackDeps
from commands import registry
from commands.base import Usage

PARSED = "kimi_parsed_command"  # the Bolt context key the parsed command travels under


def register(app: App, deps: SlackDeps, command: str = "/kimi") -> None:
    def ack_command(ack: Ack, command: dict[str, Any], context: BoltContext) -> None:
        try:
            context[PARSED] = registry.parse(command.get("text", ""))
        except Usage as usage:
            ack(text=f"Usage: {usage}")
            return
        ack()

    def run_command(command: dict[str, Any], respond: Respond, context: BoltContext) -> None:
        parsed: registry.Parsed | None = context.get(PARSED)
        if parsed is None:
            return  # already answered with the usage line
        user, channel = command["user_id"], command.get("channel_id")
        tell = responder(respond)
        answer = guard(lambda: registry.run(deps.root, deps.identity(user), parsed), tell)
        deps.follow(answer, tell, channel)

    app.command(command)(ack=ack_command, lazy=[run_command])
