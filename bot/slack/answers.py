"""How an answer reaches the person: a refusal as its sentence, a crash as a correlation id, never a traceback.

:func:`responder` answers a slash command through its ``response_url``;
:func:`clicker` answers only the person who clicked a button or submitted the
reason form; :func:`sender_line` tells whoever sent any request one line,
by whatever way back its body offers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from bot.adapters.slack.blocks import one_post, render
from bot.domain.chat_text import unmarked
from bot.logs import logger_for
from bot.services.errors import UserError
from bot.views.parts import Reply, reply

log = logger_for(__name__)

T = TypeVar("T")
Tell = Callable[[Reply], None]
Respond = Callable[..., object]  # posts to a request's response URL: text, blocks, response_type, replace_original


def respond_to(url: str | None) -> Respond | None:
    """A poster for the request's ``response_url`` (Slack takes five posts to one within 30 minutes), or None."""
    if not url:
        return None
    hook = WebhookClient(url)

    def respond(text: str = "", blocks: list[dict[str, Any]] | None = None, response_type: str = "ephemeral",
                replace_original: bool = False) -> object:
        return hook.send(text=text, blocks=blocks, response_type=response_type, replace_original=replace_original)

    return respond


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
    """Answers a slash command in its channel (or to the typist alone); what did not fit follows in one more message.

    One more, not one per piece: a response URL takes five posts in all, and a paged listing should page, not spill.
    """

    def tell(answer: Reply) -> None:
        rendered = render(answer.parts)
        kind = "ephemeral" if answer.ephemeral else "in_channel"
        respond(text=rendered.text, blocks=rendered.blocks, response_type=kind, replace_original=False)
        rest = one_post(rendered.overflow)
        if rest:
            respond(text=rest, response_type=kind, replace_original=False)

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


def _text_at(body: Mapping[str, Any], *paths: str) -> str | None:
    for path in paths:
        value: Any = body
        for key in path.split("."):
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, str) and value:
            return value
    return None


def tell_sender(client: WebClient, user: str | None, channel: str | None, url: str | None, line: str) -> None:
    """Tell one line to ``user``: through the response URL, else only to them in ``channel``, else in a DM."""
    sender_line(client, {"response_url": url, "user_id": user, "channel_id": channel}, line)


def sender_line(client: WebClient, body: Mapping[str, Any], line: str) -> None:
    """Tell the sender of ``body`` one line: through its response URL, else only to them in its channel, else in a DM."""
    line = unmarked(line)  # as typed: no mark literal() put on an id in outside text
    urls = body.get("response_urls")
    first = urls[0] if isinstance(urls, list) and urls and isinstance(urls[0], Mapping) else {}
    url = _text_at(body, "response_url") or _text_at(first, "response_url")
    user = _text_at(body, "user_id", "user.id")
    channel = _text_at(body, "channel_id", "channel.id", "container.channel_id")
    try:
        if url:
            WebhookClient(url).send(text=line, response_type="ephemeral", replace_original=False)
        elif user and channel:
            client.chat_postEphemeral(channel=channel, user=user, text=line)
        elif user:
            client.chat_postMessage(channel=user, text=line)  # a user ID as channel: the app's DM with them
        else:
            log.info("nobody to tell: %s", line)
    except Exception:
        log.exception("could not tell the sender of a Slack request: %s", line)
