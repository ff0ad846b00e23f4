"""``/kimi deploy RELEASE [to ENDPOINT]``: open a gated deployment; its checks run after Slack has the ack."""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.services.access import Identity
from bot.services.deployments import request_deploy
from bot.views.parts import Reply, reply
from commands.base import Usage, extra, q

NAME = "deploy"
USAGE = "/kimi deploy RELEASE [to ENDPOINT]"
HELP = "Deploy a registered release through the four gates; progress goes to the deployment's thread."


@dataclass(frozen=True)
class Args:
    release: str
    endpoint: str | None


def parse(args: list[str]) -> Args:
    if not args:
        raise Usage(USAGE, "name the release to deploy (`/kimi release list` shows them)")
    if len(args) == 1:
        return Args(args[0], None)
    if len(args) == 2 and args[1].lower() != "to":
        raise Usage(USAGE, f"say `to` before the endpoint: `/kimi deploy {args[0]} to {args[1]}`")
    if len(args) >= 2 and args[1].lower() != "to":
        raise Usage(USAGE, f"{q(args[1])} stands where `to` goes")
    if len(args) == 2:
        raise Usage(USAGE, "name the endpoint after `to`")
    if len(args) > 3:
        raise Usage(USAGE, extra(args[3:]))
    return Args(args[0], args[2])


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    ctx = root.ctx
    view = request_deploy(ctx, parsed.release, parsed.endpoint, identity)

    def advance() -> None:
        root.engine.advance(view.id)

    return reply(f"Deployment #{view.id} of *{view.release}* to *{view.endpoint}* requested; "
                 f"its artifact checks are running — follow the thread.", then=advance,
                 deployment_id=view.id)
