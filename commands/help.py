"""``/kimi help``: every sub-command's usage line and help sentence, taken from the modules themselves."""

from __future__ import annotations

from bot.bootstrap import Context
from bot.services.access import Identity
from bot.views.parts import Heading, Reply, Text
from commands.base import Usage

NAME = "help"
USAGE = "/kimi help"
HELP = "List the sub-commands."


def parse(args: list[str]) -> None:
    if args:
        raise Usage(USAGE)


def run(ctx: Context, identity: Identity, args: list[str]) -> Reply:
    from commands.registry import COMMANDS  # the registry imports this module

    parse(args)
    lines = [f"`{m.USAGE}` — {m.HELP}" for m in COMMANDS]
    return Reply(parts=(Heading("kimi-ops commands"), Text("\n".join(lines))), text="\n".join(lines))
