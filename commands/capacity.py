"""``/kimi capacity ENDPOINT``: the last capacity review, production's live mix beside it, and the drift."""

from __future__ import annotations

from bot.bootstrap import Root
from bot.services.access import Identity, authorize
from bot.services.capacity import capacity_view
from bot.views.capacity import capacity_lines
from bot.views.parts import Part, Reply, Text, plain
from commands.base import Usage, extra

NAME = "capacity"
USAGE = "/kimi capacity ENDPOINT"
HELP = "Show an endpoint's last capacity review, production's live request mix and how far it drifted."


def parse(args: list[str]) -> str:
    if not args:
        raise Usage(USAGE, "name the endpoint")
    if len(args) > 1:
        raise Usage(USAGE, extra(args[1:]) + " (one endpoint)")
    return args[0]


def run(root: Root, identity: Identity, name: str) -> Reply:
    authorize(root.ctx, identity, "view", f"endpoint:{name}")
    parts: list[Part] = [Text(line) for line in capacity_lines(capacity_view(root.ctx, name).as_dict())]
    return Reply(parts=tuple(parts), text=plain(parts))
