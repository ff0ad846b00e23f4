"""``/kimi release list`` and ``/kimi release show NAME``: the registered release tuples."""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.domain.names import did_you_mean
from bot.services.access import Identity, authorize
from bot.services.releases import get_release, list_releases
from bot.views.parts import Heading, Reply, Text, person, plain
from commands.base import Usage, at, extra, q

NAME = "release"
USAGE = "/kimi release list | /kimi release show NAME"
HELP = "List registered releases, or show one release tuple in full."


@dataclass(frozen=True)
class Args:
    action: str
    name: str | None


def parse(args: list[str]) -> Args:
    action = args[0].lower() if args else ""
    if not args:
        raise Usage(USAGE, "say `list` or `show NAME`")
    if action not in ("list", "show"):
        raise Usage(USAGE, f"{q(args[0])} is not `list` or `show`{did_you_mean(action, ('list', 'show'))}")
    if action == "list":
        if len(args) > 1:
            raise Usage(USAGE, extra(args[1:]))
        return Args("list", None)
    if len(args) == 1:
        raise Usage(USAGE, "name the release to show (`/kimi release list` shows them)")
    if len(args) > 2:
        raise Usage(USAGE, extra(args[2:]))
    return Args("show", args[1])


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    ctx = root.ctx
    authorize(ctx, identity, "view", "releases")
    if parsed.action == "list":
        views = list_releases(ctx, limit=50)
        lines = [f"*{v.name}* · `{v.tuple_hash[:12]}` · registered {at(v.registered_at)} by {person(v.registered_by)}"
                 for v in views]
        parts = (Heading("Releases"), Text("\n".join(lines) or "No releases registered yet."))
        return Reply(parts=parts, text=plain(parts))
    v = get_release(ctx, parsed.name or "")
    m = v.manifest
    lines = [
        f"*model:* {m.model.repo} @ `{m.model.commit}`",
        f"*weights:* {m.weights.prefix} ({len(m.weights.objects)} objects)",
        f"*image:* `{m.image}`",
        f"*serving args:* `{' '.join(m.serving.args)}`",
        f"*licence:* {m.licence.version} (sha256 `{m.licence.sha256[:12]}…`)",
        f"*evaluation report:* {m.evaluation_report or '-'}",
        f"*trust-remote-code exception:* {m.trust_remote_code_exception or '-'}",
        f"*tuple hash:* `{v.tuple_hash}`",
    ]
    parts = (Heading(f"Release {m.name}"), Text("\n".join(lines)))
    return Reply(parts=parts, text=plain(parts))
