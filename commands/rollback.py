"""``/kimi rollback [ENDPOINT] [to RELEASE]``: restore the complete previous release tuple and its exact manifest."""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.services.access import Identity
from bot.services.deployments import request_rollback
from bot.views.parts import Reply, reply
from commands.base import Usage

NAME = "rollback"
USAGE = "/kimi rollback [ENDPOINT] [to RELEASE]"
HELP = "Roll an endpoint back to the release live before (or to a named one that was live)."


@dataclass(frozen=True)
class Args:
    endpoint: str | None
    release: str | None


def parse(args: list[str]) -> Args:
    if not args:
        return Args(None, None)
    if len(args) == 1 and args[0] != "to":
        return Args(args[0], None)
    if len(args) == 2 and args[0] == "to":
        return Args(None, args[1])
    if len(args) == 3 and args[1] == "to":
        return Args(args[0], args[2])
    raise Usage(USAGE)


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    ctx = root.ctx
    view = request_rollback(ctx, parsed.endpoint, identity, parsed.release)

    def advance() -> None:
        root.engine.advance(view.id)

    return reply(f"Rollback #{view.id} of *{view.endpoint}* to *{view.release}* requested; "
                 f"the weights are being re-verified — follow the thread.", then=advance,
                 deployment_id=view.id)
