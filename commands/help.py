"""``/kimi help``: the sub-commands grouped by who uses them, each its usage line and first clause of its help.

The first line says how gates are decided (the buttons on each gate message; ``/kimi gates`` lists the ones
waiting), since no sub-command approves. Usage lines and help sentences come from the modules themselves; which
group a module is in is :data:`GROUPS` (a test keeps every sub-command in exactly one).
"""

from __future__ import annotations

from bot.bootstrap import Root
from bot.services.access import Identity
from bot.views.parts import Heading, Part, Reply, Text, plain
from commands.base import Usage, extra
from commands.catalog import OTHERS

NAME = "help"
USAGE = "/kimi help"
HELP = "List the sub-commands, grouped by who uses them."
GATES_LINE = ("Gates are decided with the *Approve* / *Reject* buttons on each gate message in the deployment's "
              "thread; `/kimi gates` lists the gates waiting for you, with their buttons.")
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Everyone: see what runs", ("status", "history", "slo", "capacity", "reservations", "release", "diff", "drills",
                                  "exceptions", "help")),
    ("Deployers: move releases", ("deploy", "rollback", "cancel", "drain", "drill")),
    ("Approvers: decide", ("gates", "ramp", "exception", "licence")),
    ("Admins: the route by hand", ("admission",)),
)
SHORT = 140


def first_clause(text: str) -> str:
    """A help sentence cut to its first clause (and at most :data:`SHORT` characters): a listing, not a manual."""
    for mark in ("; ", ". "):
        text = text.split(mark, 1)[0]
    text = text.rstrip(".")
    if len(text) > SHORT:
        text = text[:SHORT].rsplit(", ", 1)[0] + "…"
    return text + "."


def parse(args: list[str]) -> None:
    if args:
        raise Usage(USAGE, extra(args))


def run(root: Root, identity: Identity, parsed: None) -> Reply:
    modules = {m.NAME: m for m in OTHERS}
    parts: list[Part] = [Heading("kimi-ops commands"), Text(GATES_LINE)]
    for title, names in GROUPS:
        lines = [f"`{USAGE}` — {first_clause(HELP)}" if name == NAME else
                 f"`{modules[name].USAGE}` — {first_clause(modules[name].HELP)}" for name in names]
        parts.append(Text(f"*{title}*\n" + "\n".join(lines)))
    return Reply(parts=tuple(parts), text=plain(parts))
