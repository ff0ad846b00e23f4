"""Forms a slash command opens for what it was typed without (``/kimi exception add …``: the reason and expiry).

The command's module answers with a :class:`bot.views.parts.CommandForm` after
checking what it can (the role, the release or endpoint, the id): :func:`open_form`
opens it as a modal with the slash command's trigger. Its submission is checked in
the acknowledgement (a reason, a date, the carried command still parses), so a bad
answer stays in the form with its message; a ``command_form`` job then runs the
completed command for the submitter, whose role and audit are the service's, as typed.
"""

from __future__ import annotations

import json
from typing import Any

from slack_bolt import Ack, App, BoltContext
from slack_sdk.errors import SlackApiError

from bot.adapters.slack.blocks import COMMAND_FORM_MODAL, command_form_modal
from bot.logs import logger_for
from bot.slack.answers import Tell, clicker, guard
from bot.slack.deps import SlackDeps
from bot.slack.intake import Intake
from bot.slack.job import Job
from bot.slack.listeners.acks import Handler, dig
from bot.slack.listeners.reason_modal import reason
from bot.slack.middleware.replay_guard import KEY
from bot.views.parts import Reply, reply
from commands import registry
from commands.base import Usage

log = logger_for(__name__)

LOST = "This form no longer says which command it completes; nothing was recorded. Close it and type the command again."
METADATA_LIMIT = 3000  # Slack's private_metadata


def open_form(deps: SlackDeps, answer: Reply, trigger_id: str | None, channel: str | None, tell: Tell) -> None:
    """Open ``answer``'s form for the typist; if Slack cannot, say so and how to give the answers inline."""
    assert answer.form is not None
    view = command_form_modal(answer.form, channel)
    if not trigger_id or len(view["private_metadata"]) > METADATA_LIMIT:
        tell(reply(f"Slack cannot open a form for this command; nothing was recorded. {answer.text}"))
        return
    try:
        deps.client.views_open(trigger_id=trigger_id, view=view)
    except SlackApiError as exc:
        log.warning("views.open failed for a command form: %s", exc.response.get("error"))
        tell(reply(f"Slack could not open the form ({exc.response.get('error')}); nothing was recorded. {answer.text}"))


def _metadata(view: dict[str, Any]) -> dict[str, Any] | None:
    try:
        meta = json.loads(view.get("private_metadata") or "")
    except (TypeError, ValueError):
        return None
    return meta if isinstance(meta, dict) and isinstance(meta.get("command"), str) else None


def _expires(view: dict[str, Any]) -> str:
    """The date picked (``selected_date``), or one typed into a plain input (``value``)."""
    picked = dig(dig(dig(view.get("state"), "values"), "expires"), "expires")
    chosen = dig(picked, "selected_date") or dig(picked, "value")
    return chosen.strip() if isinstance(chosen, str) else ""


def register(app: App, deps: SlackDeps, intake: Intake) -> None:
    def ack_form(ack: Ack, body: dict[str, Any], view: dict[str, Any], context: BoltContext) -> None:
        meta = _metadata(view)
        if meta is None:
            ack(response_action="errors", errors={"reason": LOST})
            return
        why, day = reason(view), _expires(view)
        if not day:
            ack(response_action="errors", errors={"expires": "Pick the last day the record holds."})
            return
        if not why:
            ack(response_action="errors", errors={"reason": "Say why the rule may be broken here."})
            return
        try:
            registry.complete(registry.parse(meta["command"]), why, day)
        except Usage as usage:
            ack(response_action="errors", errors={"reason": (usage.problem or str(usage))[:300]})
            return
        channel = meta.get("channel") if isinstance(meta.get("channel"), str) else None
        intake.submit(Job("command_form", str(context[KEY]), str(dig(body.get("user"), "id") or ""), channel=channel,
                          args={"command": meta["command"], "reason": why, "expires": day}), ack)

    app.view(COMMAND_FORM_MODAL)(ack_form)


def submit(deps: SlackDeps, job: Job) -> None:
    """Run the completed command for the submitter, whose role and audit are the service's, as typed."""
    tell = clicker(deps.client, job.actor, job.channel, None)

    def run() -> Reply:
        completed = registry.complete(registry.parse(str(job.args.get("command") or "")), str(job.args.get("reason")),
                                      str(job.args.get("expires")))
        return registry.run(deps.root, deps.identity(job.actor), completed)

    deps.follow(guard(run, tell), tell, job.channel)


HANDLERS: dict[str, Handler] = {"command_form": submit}
