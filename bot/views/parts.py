"""The message parts every front end shows: headings, text, notes, tables, buttons, and a command's reply.

``Text`` holds light markdown (``*bold*``, ``_italic_``, `` `code` ``,
``<@USER>`` mentions): Slack reads it as mrkdwn, a terminal shows it as is.
Nothing here knows a chat's limits: a long :class:`Table` or :class:`Detail` is
cut or moved to a thread by the Slack renderer, not here.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

_SLACK_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")


BOT_ACTOR = "kimi-ops"
"""The actor kimi-ops records for what it does itself (an automatic restore, its own gate approvals)."""
_bot_user: list[str] = []  # the bot's own Slack user id, once ``auth.test`` named it (the Slack app sets it)


def set_bot_user(user_id: str | None) -> None:
    """Name kimi-ops itself by its Slack user id from now on (a mention Slack shows as the bot, never ``<@kimi-ops>``)."""
    _bot_user[:] = [user_id] if user_id and _SLACK_USER_ID.fullmatch(user_id) else []


def person(actor: str) -> str:
    """A Slack mention for a Slack user id (kimi-ops itself: its bot user's); any other actor (a CLI user) by its name."""
    if actor == BOT_ACTOR and _bot_user:
        return f"<@{_bot_user[0]}>"
    return f"<@{actor}>" if _SLACK_USER_ID.fullmatch(actor) else f"*{actor}*"


def moment(at: dt.datetime, token: str = "{ago}") -> str:
    """A time every reader sees in their own terms and kept current by Slack (``3 minutes ago``); UTC as fallback."""
    return f"<!date^{int(at.timestamp())}^{token}|{at:%Y-%m-%d %H:%M} UTC>"


@dataclass(frozen=True)
class Heading:
    text: str


@dataclass(frozen=True)
class Text:
    """A paragraph of light markdown."""

    text: str


@dataclass(frozen=True)
class Note:
    """Small grey context line."""

    text: str


@dataclass(frozen=True)
class Divider:
    pass


@dataclass(frozen=True)
class Detail:
    """Text that belongs beside a message, not in it: the Slack renderer posts it in the thread below.

    ``code`` keeps it monospace (each thread reply gets its own fences, so a long table never loses them).
    """

    text: str
    code: bool = False


@dataclass(frozen=True)
class Table:
    """A monospace table (see :func:`bot.views.tables.text_table`) under a caption.

    A front end that cannot show all of it in the message shows its first rows and the rest beside the message;
    ``what`` names the rows for that sentence ("… 12 more levels").
    """

    caption: str
    text: str
    what: str = "rows"

    @property
    def fenced(self) -> str:
        return f"{self.caption}\n```\n{self.text}\n```"


@dataclass(frozen=True)
class Button:
    """A button; ``action_id`` names what it asks for (:mod:`bot.views.actions`), ``value`` what it is about."""

    label: str
    action_id: str
    value: str
    style: Literal["primary", "danger"] | None = None


@dataclass(frozen=True)
class Buttons:
    buttons: tuple[Button, ...]


Part = Heading | Text | Note | Divider | Table | Buttons | Detail


@dataclass(frozen=True)
class CommandForm:
    """A form the chat opens for a command typed without its reason and expiry (Slack: a modal).

    Submitted, the form appends ``expires=DATE reason=TEXT`` to ``command`` and runs that text as if typed:
    the same parser, authorisation and audit as the command written out in full.
    """

    title: str
    question: str
    command: str
    expires: str | None = None


@dataclass(frozen=True)
class Reply:
    """What one command answers: parts to show, a plain-text fallback, who sees it, and slow work to run after."""

    parts: tuple[Part, ...]
    text: str
    ephemeral: bool = True
    # Runs after the chat got its acknowledgement; its reply (if any) is posted the same way.
    then: Callable[[], Reply | None] | None = field(default=None, compare=False)
    # The deployment this reply opened, so its thread can go where the request was made.
    deployment_id: int | None = None
    # Instead of an answer, a form to fill in (where the chat has forms; ``text`` says what to type elsewhere).
    form: CommandForm | None = None


def reply(
    *lines: str,
    ephemeral: bool = True,
    then: Callable[[], Reply | None] | None = None,
    deployment_id: int | None = None,
) -> Reply:
    """A plain reply: one text part made of ``lines``."""
    body = "\n".join(lines)
    return Reply(parts=(Text(body),), text=body, ephemeral=ephemeral, then=then, deployment_id=deployment_id)


def plain(parts: Sequence[Part]) -> str:
    """A plain-text fallback of ``parts`` (notification text, logs)."""
    out = []
    for p in parts:
        if isinstance(p, (Heading, Text, Note, Detail)):
            out.append(p.text)
        elif isinstance(p, Table):
            out.append(p.fenced)
        elif isinstance(p, Buttons):
            out.append(" ".join(f"[{b.label}]" for b in p.buttons))
    return "\n".join(out)
