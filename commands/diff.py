"""``/kimi diff A B``: what changes from release A to release B, field by field."""

from __future__ import annotations

from bot.bootstrap import Root
from bot.domain.release_diff import render_diff
from bot.services.access import Identity, authorize
from bot.services.releases import diff_releases
from bot.views.parts import Heading, Reply, Text, plain
from commands.base import Usage, extra

NAME = "diff"
USAGE = "/kimi diff RELEASE_A RELEASE_B"
HELP = "Compare two release tuples (weights, image, serving args and env, licence)."


def parse(args: list[str]) -> tuple[str, str]:
    if len(args) < 2:
        raise Usage(USAGE, "name two releases: the one to compare from, then the one to compare to")
    if len(args) > 2:
        raise Usage(USAGE, extra(args[2:]))
    return args[0], args[1]


def run(root: Root, identity: Identity, parsed: tuple[str, str]) -> Reply:
    ctx = root.ctx
    a, b = parsed
    authorize(ctx, identity, "view", "releases")
    text = render_diff(diff_releases(ctx, a, b))
    parts = (Heading(f"{a} → {b}"), Text(f"```{text}```"))
    return Reply(parts=parts, text=plain(parts))
