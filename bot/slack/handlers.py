"""Run a Slack job through its handler, without Bolt: what the worker process (and the inline app) does with a job.

Every handler is a plain function of the process's :class:`bot.slack.deps.SlackDeps` and the
:class:`bot.slack.job.Job` the acknowledgement recorded, kept beside its acknowledgement in the listener module
(``HANDLERS``); the service calls are the ones a person's request always made. A job that waited in the
replica's spool while the shared database was away first tells its person when it ran.
"""

from __future__ import annotations

import time

from bot.logs import logger_for
from bot.slack.answers import tell_sender
from bot.slack.deps import SlackDeps
from bot.slack.job import Job, clock_time
from bot.slack.listeners import command_forms, commands, gate_actions, home, incident_actions, unhandled
from bot.slack.listeners.acks import Handler

log = logger_for(__name__)

HANDLERS: dict[str, Handler] = {
    **commands.HANDLERS, **command_forms.HANDLERS, **gate_actions.HANDLERS, **incident_actions.HANDLERS,
    **home.HANDLERS, **unhandled.HANDLERS,
}


def run_job(deps: SlackDeps, job: Job) -> None:
    handler = HANDLERS.get(job.kind)
    if handler is None:  # a job recorded by a newer kimi-ops than this one: said, not run blind
        log.error("no handler for a Slack job of kind %r; it is dropped", job.kind)
        return
    if job.queued_at is not None:
        tell_sender(deps.client, job.actor or None, job.channel, job.response_url,
                    f"{job.said_as()[0].upper()}{job.said_as()[1:]}, queued on {job.queued_on or 'a replica'} at "
                    f"{clock_time(job.queued_at)} while the shared database was away, runs now "
                    f"({clock_time(time.time())}).")
    handler(deps, job)
