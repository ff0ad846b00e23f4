"""``/kimi drills ENDPOINT [N]``: the endpoint's last availability drills, with detection, recovery and alerts."""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.services.access import Identity
from bot.services.drills import list_drills
from bot.views.drills import drill_parts
from bot.views.parts import Reply, plain
from commands.base import Usage, extra, q

NAME = "drills"
USAGE = "/kimi drills ENDPOINT [N]"
HELP = "List an endpoint's last N availability drills (default 10): kind, outcome, detection and recovery time, alerts."
MAX = 50


@dataclass(frozen=True)
class Args:
    endpoint: str
    limit: int = 10


def parse(args: list[str]) -> Args:
    if not args:
        raise Usage(USAGE, "name the endpoint")
    if len(args) > 2:
        raise Usage(USAGE, extra(args[2:]))
    if len(args) == 2 and not args[1].isdigit():
        raise Usage(USAGE, f"{q(args[1])} is not a number of drills")
    return Args(args[0], min(int(args[1]), MAX) if len(args) == 2 else 10)


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    drills = list_drills(root.ctx, identity, parsed.endpoint, parsed.limit)
    parts = drill_parts(parsed.endpoint, drills)
    return Reply(parts=tuple(parts), text=plain(parts))
