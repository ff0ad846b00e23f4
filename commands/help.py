"""``/kimi help``: every sub-command's usage line and help sentence, taken from the modules themselves."""

from __future__ import annotations

from bot.bootstrap import Root
from bot.services.access import Identity
from bot.views.parts import Heading, Reply, Text
from commands.base import Usage, extra
from commands.catalog import OTHERS

NAME = "help"
USAGE = "/kimi help"
HELP = "List the sub-commands."


def parse(args: list[str]) -> None:
    if args:
        raise Usage(USAGE, extra(args))


def run(root: Root, identity: Identity, parsed: None) -> Reply:
    lines = [f"`{USAGE}` — {HELP}", *(f"`{m.USAGE}` — {m.HELP}" for m in OTHERS)]
    return Reply(parts=(Heading("kimi-ops commands"), Text("\n".join(lines))), text="\n".join(lines))
