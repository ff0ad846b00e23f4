"""One way to name a command per place: ``/kimi …`` in Slack, ``kimi-ops …`` in a terminal.

The services name a command a person can type the way Slack spells it
(`` `/kimi cancel 5 force` ``); the CLI prints every sentence through
:func:`for_terminal`, which rewrites each such command into the CLI's own
spelling (`` `kimi-ops cancel 5 --force` ``). Commands that exist only in a
terminal (``kimi-ops db upgrade``) are written that way everywhere. Outside text in a
sentence is escaped for Slack (:func:`bot.domain.chat_text.literal`); a terminal shows it as typed.
"""

from __future__ import annotations

import re

from bot.domain.chat_text import unmarked

_SLASH = re.compile(r"`/kimi ([^`]*)`")


def terminal_command(words: str) -> str:
    """``/kimi`` words as the ``kimi-ops`` command line that does the same."""
    parts = words.split()
    if not parts:
        return "kimi-ops --help"
    head, rest = parts[0].lower(), parts[1:]
    if head == "diff":
        return " ".join(["kimi-ops", "release", "diff", *rest])
    if head in ("deploy", "rollback") and "to" in rest:
        at = rest.index("to")
        rest = [*rest[:at], "--to", *rest[at + 1:]]
    if head == "cancel":
        rest = ["--force" if w == "force" else w for w in rest]
    if head == "drill":
        rest = ["--accept-user-impact" if w == "accept-user-impact" else w for w in rest]
        if rest[:1] == ["reject"] and len(rest) > 2:
            rest = [*rest[:2], "--reason", " ".join(rest[2:])]
    if head == "help":
        return "kimi-ops --help"
    return " ".join(["kimi-ops", head, *rest])


def for_terminal(text: str) -> str:
    """``text`` with every `` `/kimi …` `` command written as the terminal's `` `kimi-ops …` ``, and Slack's
    escapes (``&lt;``, ``&gt;``, ``&amp;``) as the characters they stand for (without the marks
    :func:`bot.domain.chat_text.literal` puts on typed ids)."""
    text = _SLASH.sub(lambda m: f"`{terminal_command(m.group(1))}`", unmarked(text))
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
