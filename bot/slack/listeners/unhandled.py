"""Catch-alls, registered last: a request of a kind kimi-ops takes, but naming no listener of ours, gets a 200 and one line.

Bolt answers 404 to a request no listener matches, which Slack shows as an
error. A button, shortcut, form or slash command kimi-ops does not (or no
longer) know — an old message's button, a shortcut added in the app's
settings — is acknowledged here and its sender told so in one line; an event
type we did not subscribe to, or an options request, is just acknowledged.
"""

from __future__ import annotations

import re
from typing import Any

from slack_bolt import Ack, App, BoltContext

from bot.slack.answers import tell_sender
from bot.slack.deps import SlackDeps
from bot.slack.intake import Intake
from bot.slack.job import Job
from bot.slack.listeners.acks import Handler, ack_now, click_job, dig

ANY = re.compile(r".*", re.DOTALL)
HELP = "Try `/kimi help`."


def _name(value: Any) -> str:
    return str(value)[:80].replace("`", "'")


def register(app: App, intake: Intake) -> None:
    def unknown_command(ack: Ack, command: dict[str, Any]) -> None:
        ack(text=f"kimi-ops does not handle `{_name(command.get('command'))}`. {HELP}")

    def unknown_click(ack: Ack, body: dict[str, Any], context: BoltContext) -> None:
        action = (body.get("actions") or [{}])[0]
        line = (f"kimi-ops does not know the button `{_name(dig(action, 'action_id'))}` (an old message?); nothing was "
                f"done. {HELP}")
        intake.submit(click_job("tell", body, context, line=line), ack)

    def unknown_shortcut(ack: Ack, body: dict[str, Any], context: BoltContext) -> None:
        line = f"kimi-ops has no shortcut `{_name(body.get('callback_id'))}`; nothing was done. {HELP}"
        intake.submit(click_job("tell", body, context, line=line), ack)

    def ack_unknown_form(ack: Ack, view: dict[str, Any]) -> None:
        ack(response_action="update", view=notice_modal(
            f"kimi-ops does not know the form `{_name(view.get('callback_id'))}`; nothing was done. {HELP}"))

    def ack_options(ack: Ack) -> None:
        ack(options=[])

    app.command(ANY)(unknown_command)
    app.action(ANY)(unknown_click)
    app.shortcut(ANY)(unknown_shortcut)
    app.view(ANY)(ack_unknown_form)
    app.view_closed(ANY)(ack_now)
    app.options(ANY)(ack_options)
    app.event(ANY)(ack_now)


def tell(deps: SlackDeps, job: Job) -> None:
    """One line to whoever sent a request kimi-ops cannot act on."""
    tell_sender(deps.client, job.actor or None, job.channel, job.response_url, str(job.args.get("line") or ""))


HANDLERS: dict[str, Handler] = {"tell": tell}


def notice_modal(line: str) -> dict[str, Any]:
    """A modal holding one line, to replace a submitted form kimi-ops cannot act on."""
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": "kimi-ops"},
        "close": {"type": "plain_text", "text": "Close"},
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": line[:3000]}}],
    }
