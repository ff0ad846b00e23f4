"""``/kimi drain wait|abort DEPLOYMENT``: answer a drain that passed its deadline with requests still running."""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.domain.chat_text import stored_reason
from bot.services.access import Identity
from bot.services.deployments import decide_drain
from bot.views.deployments import state_words
from bot.views.parts import Reply, reply
from commands.base import Usage, deployment_number, extra, q

NAME = "drain"
USAGE = "/kimi drain wait|abort DEPLOYMENT"
HELP = "When requests still run at the drain deadline: `wait` longer, or `abort` (users get the running release back)."


@dataclass(frozen=True)
class Args:
    choice: str
    deployment: int


def parse(args: list[str]) -> Args:
    if not args:
        raise Usage(USAGE, "say `wait` or `abort`, then the deployment number")
    if args[0].lower() not in ("wait", "abort"):
        raise Usage(USAGE, f"{q(args[0])} is not `wait` or `abort`")
    if len(args) == 1:
        raise Usage(USAGE, "name the deployment by its number")
    if len(args) > 2:
        raise Usage(USAGE, extra(args[2:]))
    return Args(args[0].lower(), deployment_number(args[1], USAGE))


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    view = decide_drain(root.ctx, parsed.deployment, parsed.choice, identity)

    def advance() -> None:
        root.engine.advance(view.id)

    why = stored_reason(view.state_reason, view.actors)
    return reply(f"Deployment #{view.id} is {state_words(view.state)}: {why}", then=advance, deployment_id=view.id)
