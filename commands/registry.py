"""The one explicit list of ``/kimi`` sub-commands, and the dispatch from a command's text to a module.

A new sub-command is one new module in ``commands/`` plus one line in :mod:`commands.catalog`.
A command's text is parsed once (:func:`parse`, pure); the :class:`Parsed`
value it returns is what :func:`run` hands to the module, so the Slack app
parses in its acknowledgement and carries the result to the work after it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from types import ModuleType

from bot.bootstrap import Root
from bot.domain.names import did_you_mean
from bot.services.access import Identity
from bot.views.parts import Reply
from commands import gates, help
from commands.base import Usage, q
from commands.catalog import OTHERS

COMMANDS: tuple[ModuleType, ...] = (help, *OTHERS)
BY_NAME: dict[str, ModuleType] = {m.NAME: m for m in COMMANDS}
# Words people type for a decision that only the gate message's buttons take (each bound to the report they read).
DECIDED_WITH_BUTTONS = {"approve": "approved", "reject": "rejected"}


@dataclass(frozen=True)
class Parsed:
    """A sub-command's name and what its module's ``parse`` returned (plain values: it can be copied between threads)."""

    name: str
    args: object


def _words(text: str) -> tuple[ModuleType, list[str]]:
    try:
        words = shlex.split(text or "")
    except ValueError:
        raise Usage(help.USAGE, "a quote is opened and never closed") from None
    if not words:
        return help, []
    module = BY_NAME.get(words[0].lower())
    decided = DECIDED_WITH_BUTTONS.get(words[0].lower())
    if module is None and decided is not None:
        raise Usage(gates.USAGE, f"a gate is {decided} with the buttons on its message in the deployment's thread; "
                                 "`/kimi gates` lists the gates waiting for you, with those buttons")
    if module is None:
        hint = did_you_mean(words[0], BY_NAME) or f"; `{help.USAGE}` lists them"
        raise Usage(help.USAGE, f"there is no sub-command {q(words[0])}{hint}")
    return module, words[1:]


def parse(text: str) -> Parsed:
    """The sub-command and its parsed arguments; :class:`Usage` for unknown or malformed input. Pure."""
    module, args = _words(text)
    return Parsed(module.NAME, module.parse(args))


def complete(parsed: Parsed, reason: str, expires: str) -> Parsed:
    """``parsed`` with a form's reason and expiry (see :class:`bot.views.parts.CommandForm`); :class:`Usage` if bad."""
    module = BY_NAME[parsed.name]
    fill = getattr(module, "complete", None)
    if fill is None:
        raise Usage(module.USAGE, f"`{parsed.name}` takes no form")
    return Parsed(parsed.name, fill(parsed.args, reason, expires))


def split(text: str) -> tuple[ModuleType, list[str]]:
    """The sub-command module and its argument words, refusing malformed input as :func:`parse` does."""
    module, args = _words(text)
    module.parse(args)
    return module, args


def may_open_form(parsed: Parsed) -> bool:
    """Whether running ``parsed`` may answer with a form (its module's ``opens_form``); pure.

    A form opens with the slash command's trigger, which Slack honours for 3 seconds only, so the Slack edge
    runs such a command at once rather than handing it to the worker process.
    """
    opens = getattr(BY_NAME[parsed.name], "opens_form", None)
    return bool(opens(parsed.args)) if opens is not None else False


def run(root: Root, identity: Identity, parsed: Parsed) -> Reply:
    """Run an already parsed command: its module authorises, calls one service and renders."""
    reply: Reply = BY_NAME[parsed.name].run(root, identity, parsed.args)
    return reply


def dispatch(root: Root, identity: Identity, text: str) -> Reply:
    return run(root, identity, parse(text))
