"""``/kimi exceptions [all]``: the recorded security exceptions, with their scope, reviewer and expiry."""

from __future__ import annotations

from bot.bootstrap import Root
from bot.domain.chat_text import literal
from bot.services.access import Identity
from bot.services.governance import list_exceptions
from bot.views.parts import Heading, Reply, Text, plain
from commands.base import Usage, q

NAME = "exceptions"
USAGE = "/kimi exceptions [all]"
HELP = "List the security exceptions in force (trust-remote-code, unscanned images, payload capture…); `all` adds expired ones."


def parse(args: list[str]) -> bool:
    if args and [a.lower() for a in args] != ["all"]:
        raise Usage(USAGE, f"{q(' '.join(args))}: the only word this takes is `all`")
    return bool(args)


def run(root: Root, identity: Identity, parsed: bool) -> Reply:
    now = root.ctx.clock.now()
    lines = [
        f"*{e.id}* · {e.kind} · {e.scope} {e.target} · by {e.reviewer} · "
        f"{'expired' if e.expires_at <= now else 'until'} {e.expires_at:%Y-%m-%d} · {literal(e.reason)}"
        for e in list_exceptions(root.ctx, identity, include_expired=parsed)[:30]
    ]
    parts = (Heading("Security exceptions"), Text("\n".join(lines) or "None in force."))
    return Reply(parts=parts, text=plain(parts))
