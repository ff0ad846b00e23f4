"""``/kimi admission open|close ENDPOINT --reason …``: an admin takes over what users get (audited)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.services.access import Identity
from bot.services.admission import override_admission
from bot.views.parts import Reply, reply
from commands.base import Usage, q

NAME = "admission"
USAGE = "/kimi admission open|close ENDPOINT --reason TEXT"
HELP = "Admins open or close what users reach of an endpoint by hand (after a failed restore, say); the reason is recorded."


@dataclass(frozen=True)
class Args:
    word: str
    endpoint: str
    reason: str


def parse(args: list[str]) -> Args:
    if not args:
        raise Usage(USAGE, "say `open` or `close`, the endpoint and `--reason`")
    if args[0].lower() not in ("open", "close", "closed"):
        raise Usage(USAGE, f"{q(args[0])} is not `open` or `close`")
    if len(args) < 2:
        raise Usage(USAGE, "name the endpoint")
    word = "open" if args[0].lower() == "open" else "closed"
    rest = args[2:]
    if not rest or rest[0] != "--reason" or not " ".join(rest[1:]).strip():
        raise Usage(USAGE, "say why with `--reason …`")
    return Args(word, args[1].lower(), " ".join(rest[1:]).strip())


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    view = override_admission(root.ctx, parsed.endpoint, parsed.word, parsed.reason, identity)
    return reply(f"Admission of *{view.endpoint}* is now {view.admission}: {view.users_get}.", ephemeral=False)
