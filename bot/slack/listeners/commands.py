"""The slash command (``/kimi …``), parsed once in the acknowledgement and run after it; and the "Next" page button.

The ack function parses the text (pure, microseconds) and either answers the
usage line or stores the :class:`commands.registry.Parsed` value in Bolt's
request context, which Bolt copies to the lazy function; the lazy function
resolves the person, runs the command module with those parsed arguments and
follows up. Nothing parses the text a second time in one process; the worker process of ``kimi-ops serve``
(:mod:`bot.slack.work`), which receives the request without the acknowledgement's context, parses it again.
A command typed without its reason and expiry answers with a form (``listeners/command_forms.py``), opened
here with the command's trigger.
"""

from __future__ import annotations

import uuid
from typing import Any

from slack_bolt import Ack, App, BoltContext, Respond

from bot.logs import logger_for
from bot.slack.answers import clicker, guard, responder
from bot.slack.deps import SlackDeps
from bot.slack.listeners.acks import ack_now
from bot.slack.listeners.command_forms import open_form
from bot.slack.listeners.gate_actions import click
from bot.slack.work import RUN_HERE
from bot.views.actions import NEXT_PAGE, RUN_COMMAND
from bot.views.parts import Reply, reply
from commands import registry
from commands.base import Usage

log = logger_for(__name__)

PARSED = "kimi_parsed_command"  # the Bolt context key the parsed command travels under


def register(app: App, deps: SlackDeps, command: str = "/kimi") -> None:
    def ack_command(ack: Ack, command: dict[str, Any], context: BoltContext) -> None:
        try:
            context[PARSED] = parsed = registry.parse(command.get("text") or "")
            if registry.may_open_form(parsed):
                context[RUN_HERE] = True  # the form needs the command's trigger (3 s): not through the worker
        except Usage as usage:
            ack(text=str(usage))
            return
        except Exception:
            # A parser bug must still answer the typist, in the acknowledgement, rather than Bolt's 500.
            correlation = uuid.uuid4().hex[:12]
            log.exception("could not parse a slash command", extra={"correlation_id": correlation})
            ack(text=f"kimi-ops could not read that command; `/kimi help` lists them (correlation id `{correlation}`).")
            return
        ack()

    def run_command(command: dict[str, Any], respond: Respond, context: BoltContext) -> None:
        parsed: registry.Parsed | None = context.get(PARSED)
        if parsed is None:
            # In the worker process the acknowledgement ran elsewhere: parse again (pure); what did not parse
            # was answered with the usage line in the acknowledgement.
            try:
                parsed = registry.parse(command.get("text") or "")
            except Exception:
                return
        user, channel = command["user_id"], command.get("channel_id")
        tell = responder(respond)
        answer = guard(lambda: registry.run(deps.root, deps.identity(user), parsed), tell)
        if answer is not None and answer.form is not None:
            open_form(deps, answer, command.get("trigger_id"), channel, tell)
            return
        deps.follow(answer, tell, channel)

    def next_page(body: dict[str, Any], respond: Respond) -> None:
        # The button carries the command text of the next page: parsed and authorised like typed text, for the clicker.
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)

        def run() -> Reply:
            try:
                parsed = registry.parse(value or "")
            except Usage as usage:
                return reply(str(usage))
            return registry.run(deps.root, deps.identity(user), parsed)

        deps.follow(guard(run, tell), tell, channel)

    app.command(command)(ack=ack_command, lazy=[run_command])
    app.action(NEXT_PAGE)(ack=ack_now, lazy=[next_page])
    app.action(RUN_COMMAND)(ack=ack_now, lazy=[next_page])  # the same: a command's text, run for the clicker
