"""``/kimi rollback [ENDPOINT] [to RELEASE]``: restore the complete previous release tuple and its exact manifest.

``/kimi rollback SERVICE`` (a pair of endpoints) moves every user back to the side kept warm: one route change.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.services.access import Identity
from bot.services.deployments import request_rollback
from bot.services.pair_sides import service_settings
from bot.services.pairs import rollback_service
from bot.views.parts import Reply, reply
from bot.views.ramp import service_rolled_back
from commands.base import Usage, extra, q

NAME = "rollback"
USAGE = "/kimi rollback [ENDPOINT|SERVICE] [to RELEASE]"
HELP = ("Roll an endpoint back to the release live before (or to a named one that was live); "
        "a service moves its users back to the side kept warm in one route change.")


@dataclass(frozen=True)
class Args:
    endpoint: str | None
    release: str | None


def parse(args: list[str]) -> Args:
    words = [w.lower() for w in args]
    if not args:
        return Args(None, None)
    if words[0] == "to":
        if len(args) == 1:
            raise Usage(USAGE, "name the release after `to`")
        if len(args) > 2:
            raise Usage(USAGE, extra(args[2:]))
        return Args(None, args[1])
    if len(args) == 1:
        return Args(args[0], None)
    if words[1] != "to":
        raise Usage(USAGE, f"say `to` before the release: `/kimi rollback {args[0]} to {args[1]}`"
                    if len(args) == 2 else f"{q(args[1])} stands where `to` goes")
    if len(args) == 2:
        raise Usage(USAGE, "name the release after `to`")
    if len(args) > 3:
        raise Usage(USAGE, extra(args[3:]))
    return Args(args[0], args[2])


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    ctx = root.ctx
    if parsed.release is None and service_settings(ctx, parsed.endpoint) is not None:
        done = rollback_service(ctx, str(parsed.endpoint), identity)
        return reply(service_rolled_back(done))
    view = request_rollback(ctx, parsed.endpoint, identity, parsed.release)

    def advance() -> None:
        root.engine.advance(view.id)

    return reply(f"Rollback #{view.id} of *{view.endpoint}* to *{view.release}* requested; "
                 f"the weights are being re-verified — follow the thread.", then=advance,
                 deployment_id=view.id)
