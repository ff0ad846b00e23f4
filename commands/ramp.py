"""``/kimi ramp approve DEPLOYMENT STEP``: let a ramp that holds before a step (``ramp.approval_steps``) go on."""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.services.access import Identity
from bot.services.ramp_approvals import approve_ramp_step
from bot.views.parts import Reply, reply
from commands.base import Usage, deployment_number, extra, q

NAME = "ramp"
USAGE = "/kimi ramp approve DEPLOYMENT STEP"
HELP = "Let a ramp that holds before a step (the endpoint's or service's ramp.approval_steps) move on to it."


@dataclass(frozen=True)
class Args:
    deployment: int
    step: str


def parse(args: list[str]) -> Args:
    if not args or args[0].lower() != "approve":
        raise Usage(USAGE, f"{q(args[0])} is not `approve`" if args else "say `approve`, the deployment and the step")
    if len(args) < 3:
        raise Usage(USAGE, "name the deployment by its number, then the step (e.g. 50%)")
    if len(args) > 3:
        raise Usage(USAGE, extra(args[3:]))
    step = args[2].lower()
    return Args(deployment_number(args[1], USAGE), step if step in ("open", "internal") or step.endswith("%") else f"{step}%")


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    view = approve_ramp_step(root.ctx, parsed.deployment, parsed.step, identity)

    def advance() -> None:
        root.engine.advance(view.id)

    return reply(f"Ramp step {parsed.step} of deployment #{view.id} approved; the ramp goes on.", then=advance,
                 deployment_id=view.id)
