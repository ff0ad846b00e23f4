"""The one explicit list of ``/kimi`` sub-commands, and the dispatch from a command's text to a module.

A new sub-command is one new module in ``commands/`` plus one line here.
"""

from __future__ import annotations

import shlex
from types import ModuleType

from bot.bootstrap import Context
from bot.services.access import Identity
from bot.views.parts import Reply
from commands import cancel, deploy, diff, gates, help, history, release, reservations, rollback, status
from commands.base import Usage

COMMANDS: tuple[ModuleType, ...] = (help, deploy, status, history, release, diff, gates, rollback, cancel, reservations)
BY_NAME: dict[str, ModuleType] = {m.NAME: m for m in COMMANDS}


def split(text: str) -> tuple[ModuleType, list[str]]:
    """The sub-command module and its arguments; :class:`Usage` for unknown or malformed input."""
    try:
        words = shlex.split(text or "")
    except ValueError:
        raise Usage("unbalanced quotes; " + help.USAGE + " lists the sub-commands") from None
    if not words:
        return help, []
    module = BY_NAME.get(words[0].lower())
    if module is None:
        raise Usage(f"unknown sub-command `{words[0]}`; try `{help.USAGE}`")
    module.parse(words[1:])  # pure: malformed input is refused before any work or acknowledgement delay
    return module, words[1:]


def dispatch(ctx: Context, identity: Identity, text: str) -> Reply:
    module, args = split(text)
    return module.run(ctx, identity, args)
