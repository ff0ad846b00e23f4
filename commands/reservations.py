"""``/kimi reservations``: the Capacity Blocks and training plans the watch last saw, with the time left."""

from __future__ import annotations

from bot.bootstrap import Root
from bot.domain.expiry import format_remaining
from bot.services.access import Identity, authorize
from bot.services.reservations import reservation_overview
from bot.views.parts import Heading, Reply, Text, plain
from commands.base import Usage, at, extra

NAME = "reservations"
USAGE = "/kimi reservations"
HELP = "Show reserved capacity behind each endpoint and how long it lasts."


def parse(args: list[str]) -> None:
    if args:
        raise Usage(USAGE, extra(args))


def run(root: Root, identity: Identity, parsed: None) -> Reply:
    ctx = root.ctx
    authorize(ctx, identity, "view", "reservations")
    lines = [
        f"*{v.id.rsplit('/', 1)[-1]}* ({v.kind}, {v.instance_count} × {v.instance_type}, {v.availability_zone or 'any zone'}) "
        f"· {v.state} · endpoint {v.endpoint or '-'} · ends {at(v.end)} · *{format_remaining(v.left)} left*"
        for v in reservation_overview(ctx)
    ]
    parts = (Heading("Reservations"), Text("\n".join(lines) or "None seen yet; the reservation watch reads AWS periodically."))
    return Reply(parts=parts, text=plain(parts))
