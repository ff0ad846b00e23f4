"""The slash command (``/kimi …``), parsed in the acknowledgement and run as a job; and the "Next" page button.

The acknowledgement parses the text (pure, microseconds) and either answers the usage line or hands on a
``command`` job (the command and its text, the typist, the channel, the response URL, the trigger); the job's
handler, in the worker process or here, resolves the person, runs the command module (authorise through the
service, one service call, render) and follows up. In the same process the parsed value travels with the job; the
worker process, which reads the job as JSON, parses the text again (pure, the same answer). A command
typed without its reason and expiry answers with a form
(``listeners/command_forms.py``), which opens with the command's trigger: such a command runs at once here.
"""

from __future__ import annotations

import uuid
from typing import Any

from slack_bolt import Ack, App, BoltContext

from bot.logs import logger_for
from bot.slack.answers import clicker, guard, respond_to, responder
from bot.slack.deps import SlackDeps
from bot.slack.intake import Intake
from bot.slack.job import Job
from bot.slack.listeners.acks import Handler, hand_click, text
from bot.slack.listeners.command_forms import open_form
from bot.slack.middleware.replay_guard import KEY
from bot.views.actions import NEXT_PAGE, RUN_COMMAND
from bot.views.parts import Reply, reply
from commands import registry
from commands.base import Usage

log = logger_for(__name__)


def register(app: App, deps: SlackDeps, intake: Intake, command: str = "/kimi") -> None:
    def ack_command(ack: Ack, command: dict[str, Any], context: BoltContext) -> None:
        typed = command.get("text") or ""
        try:
            parsed = registry.parse(typed)
        except Usage as usage:
            ack(text=str(usage))
            return
        except Exception:
            # A parser bug must still answer the typist, in the acknowledgement, rather than Bolt's 500.
            correlation = uuid.uuid4().hex[:12]
            log.exception("could not parse a slash command", extra={"correlation_id": correlation})
            ack(text=f"kimi-ops could not read that command; `/kimi help` lists them (correlation id `{correlation}`).")
            return
        job = Job("command", str(context[KEY]), str(command.get("user_id") or ""), channel=text(command.get("channel_id")),
                  response_url=text(command.get("response_url")), trigger=text(command.get("trigger_id")),
                  args={"command": command.get("command"), "text": typed}, parsed=parsed)
        # A form needs the command's trigger (3 s): such a command is not handed to the worker.
        intake.submit(job, ack, at_once=registry.may_open_form(parsed))

    app.command(command)(ack_command)
    app.action(NEXT_PAGE)(hand_click(intake, "next_page"))
    app.action(RUN_COMMAND)(hand_click(intake, "next_page"))  # the same: a command's text, run for the clicker


def run_command(deps: SlackDeps, job: Job) -> None:
    parsed = job.parsed
    if not isinstance(parsed, registry.Parsed):  # recorded as JSON: parse the text again (pure, the same answer)
        try:
            parsed = registry.parse(str(job.args.get("text") or ""))
        except Exception:  # answered with the usage line in the acknowledgement
            return
    respond = respond_to(job.response_url)
    if respond is None:
        return
    tell = responder(respond)
    command = parsed
    answer = guard(lambda: registry.run(deps.root, deps.identity(job.actor), command), tell)
    if answer is not None and answer.form is not None:
        open_form(deps, answer, job.trigger, job.channel, tell)
        return
    deps.follow(answer, tell, job.channel)


def next_page(deps: SlackDeps, job: Job) -> None:
    # The button carries the command text of the next page: parsed and authorised like typed text, for the clicker.
    tell = clicker(deps.client, job.actor, job.channel, respond_to(job.response_url))

    def run() -> Reply:
        try:
            parsed = registry.parse(str(job.args.get("value") or ""))
        except Usage as usage:
            return reply(str(usage))
        return registry.run(deps.root, deps.identity(job.actor), parsed)

    deps.follow(guard(run, tell), tell, job.channel)


HANDLERS: dict[str, Handler] = {"command": run_command, "next_page": next_page}
