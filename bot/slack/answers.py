"""How an answer reaches the person: a refusal as its sentence, a crash as a correlation id, never a traceback.

:func:`responder` answers a slash command through its ``response_url``;
:func:`clicker` answers only the person who clicked a button or submitted the
reason form.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TypeVar

from slack_bolt import Respond
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.adapters.slack.blocks import render
from bot.services.errors import UserError
from bot.views.parts import Reply, reply

log = logging.getLogger("kimi_ops.slack")

T = TypeVar("T")
Tell = Callable[[Reply], None]


def guard(work: Callable[[], T], tell: Tell) -> T | None:
    """Run ``work``; a refusal becomes its sentence, a crash a correlation id (logged with the traceback)."""
    try:
        return work()
    except UserError as exc:
        tell(reply(str(exc)))
    except Exception:
        correlation = uuid.uuid4().hex[:12]
        log.exception("request failed", extra={"correlation_id": correlation})
        tell(reply(f"kimi-ops hit an unexpected error; ask an operator to look up correlation id `{correlation}` in its log."))
    return None


def responder(respond: Respond) -> Tell:
    """Answers a slash command in its channel (or to the typist alone), overflow as follow-up messages."""

    def tell(answer: Reply) -> None:
        rendered = render(answer.parts)
        kind = "ephemeral" if answer.ephemeral else "in_channel"
        respond(text=rendered.text, blocks=rendered.blocks, response_type=kind, replace_original=False)
        for piece in rendered.overflow:
            respond(text=piece, response_type=kind, replace_original=False)

    return tell


def clicker(client: WebClient, user: str, channel: str | None, respond: Respond | None) -> Tell:
    """Answers only the person who clicked or submitted."""

    def tell(answer: Reply) -> None:
        rendered = render(answer.parts)
        if channel:
            try:
                client.chat_postEphemeral(channel=channel, user=user, text=rendered.text, blocks=rendered.blocks)
                return
            except SlackApiError as exc:
                # e.g. a button in a DM or a channel the bot is not in: the response_url still reaches the clicker.
                if respond is None:
                    raise
                log.info("ephemeral post to %s failed (%s); answering through response_url", channel, exc.response.get("error"))
        if respond is not None:
            respond(text=rendered.text, blocks=rendered.blocks, response_type="ephemeral", replace_original=False)
        else:
            log.warning("no channel to answer %s: %s", user, rendered.text)

    return tell
