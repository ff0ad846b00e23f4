"""Paged answers: the ``--page N`` option a long listing takes, and the "Next" button that asks for the next page.

A listing that could outgrow one Slack message (Block Kit's 50 blocks, ~13k of
JSON) shows one page and a "Next" button carrying the command text of the
next page, so nothing has to spill into overflow posts.
"""

from __future__ import annotations

import re

from bot.views.actions import NEXT_PAGE
from bot.views.parts import Button, Buttons
from commands.base import Usage, q

# Small, plain numbers only: Python's int() refuses 4,300+ digits with a ValueError, and no listing is that long.
NUMBER = re.compile(r"[0-9]{1,4}")
MAX_PAGE = 1000


def number(word: str, usage: str, *, low: int = 1) -> int:
    """``word`` as a positive count, or :class:`Usage` (never a ValueError, however many digits)."""
    if not NUMBER.fullmatch(word) or int(word) < low:
        raise Usage(usage, f"{q(word)} is not a number from {low} to 9999")
    return int(word)


def take_page(args: list[str], usage: str) -> tuple[list[str], int]:
    """``args`` without a trailing ``--page N``, and N (1 when absent)."""
    if len(args) >= 2 and args[-2] == "--page":
        page = number(args[-1], usage)
        if page > MAX_PAGE:
            raise Usage(usage, f"page {page} is past the last ({MAX_PAGE})")
        return args[:-2], page
    if "--page" in args:
        raise Usage(usage, "`--page` goes last, with its number")
    return args, 1


def next_button(command: str, page: int, shown: str) -> Buttons:
    """The "Next" button asking for ``page`` of ``command`` (its words without ``/kimi``)."""
    return Buttons((Button(f"Next: {shown}", NEXT_PAGE, f"{command} --page {page}"),))
