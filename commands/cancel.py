"""``/kimi cancel DEPLOYMENT [force]``: cancel an in-flight deployment (admins may force a stuck one)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.domain.chat_text import stored_reason
from bot.services.access import Identity
from bot.services.deployments import cancel
from bot.views.deployments import state_words
from bot.views.parts import Reply, reply
from commands.base import Usage, deployment_number, extra, q

NAME = "cancel"
USAGE = "/kimi cancel DEPLOYMENT [force]"
HELP = "Cancel an in-flight deployment and release its endpoint; `force` (admins) breaks a stuck one."


@dataclass(frozen=True)
class Args:
    deployment: int
    force: bool


def parse(args: list[str]) -> Args:
    if not args:
        raise Usage(USAGE, "name the deployment to cancel by its number")
    number = deployment_number(args[0], USAGE)
    if len(args) == 1:
        return Args(number, False)
    if args[1].lower() != "force":
        raise Usage(USAGE, f"{q(args[1])}: the only word after the number is `force`")
    if len(args) > 2:
        raise Usage(USAGE, extra(args[2:]))
    return Args(number, True)


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    ctx = root.ctx
    view = cancel(ctx, parsed.deployment, identity, force=parsed.force)
    root.engine.stop(view.id)  # a rollout watch or a ramp's soak of this deployment stops instead of running on

    def advance() -> None:
        root.engine.advance(view.id)  # reopens (cancelled before apply) or drives the restore (after apply)

    why = stored_reason(view.state_reason, view.actors)
    return reply(f"Deployment #{view.id} is {state_words(view.state)}: {why}", then=advance, deployment_id=view.id)
