"""``/kimi drill ENDPOINT KIND [accept-user-impact]``, ``/kimi drill approve N``, ``/kimi drill reject N REASON``.

Asking records the drill (a deployer); an approver other than the requester approves it, and the drill then runs
as the approval's follow-up, its result said in the endpoint's channel (or rejects it with a reason).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.domain.chat_text import literal
from bot.domain.drills import KINDS
from bot.domain.names import did_you_mean
from bot.services.access import Identity
from bot.services.drills import decide_drill, request_drill, run_drill
from bot.views.parts import Reply, reply
from commands.base import Usage, extra, q

NAME = "drill"
USAGE = "/kimi drill ENDPOINT KIND [accept-user-impact] | approve N | reject N REASON"
HELP = ("Ask for an availability drill (KIND: " + ", ".join(KINDS) + "); an approver other than you approves or "
        "rejects it. Refused while users are admitted unless you add accept-user-impact.")
ACCEPT = "accept-user-impact"


@dataclass(frozen=True)
class Args:
    action: str  # ask | approve | reject
    endpoint: str = ""
    kind: str = ""
    accept_user_impact: bool = False
    drill: int = 0
    reason: str = ""


def _number(word: str) -> int:
    if not word.lstrip("#").isdigit():
        raise Usage(USAGE, f"{q(word)} is not a drill number")
    return int(word.lstrip("#"))


def parse(args: list[str]) -> Args:
    if not args:
        raise Usage(USAGE, "name the endpoint and the kind of drill")
    head = args[0].lower()
    if head in ("approve", "reject"):
        if len(args) < 2:
            raise Usage(USAGE, f"say which drill to {head} by its number")
        number = _number(args[1])
        if head == "approve":
            if len(args) > 2:
                raise Usage(USAGE, extra(args[2:]))
            return Args("approve", drill=number)
        reason = " ".join(args[2:]).strip()
        if not reason:
            raise Usage(USAGE, "say why the drill is rejected, after its number")
        return Args("reject", drill=number, reason=reason)
    if len(args) < 2:
        raise Usage(USAGE, "name the kind of drill after the endpoint")
    kind = args[1].lower()
    if kind not in KINDS:
        raise Usage(USAGE, f"there is no drill kind {q(args[1])}{did_you_mean(args[1], KINDS) or ''}")
    rest = args[2:]
    if len(rest) > 1:
        raise Usage(USAGE, extra(rest[1:]))
    if rest and rest[0].lower() != ACCEPT:
        raise Usage(USAGE, f"{q(rest[0])} is not `{ACCEPT}`")
    return Args("ask", endpoint=args[0], kind=kind, accept_user_impact=bool(rest))


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    ctx = root.ctx
    if parsed.action == "ask":
        view = request_drill(ctx, identity, parsed.endpoint, parsed.kind, accept_user_impact=parsed.accept_user_impact)
        return reply(f"Drill #{view.id} ({view.kind} on *{view.endpoint}*) waits for an approver other than you: "
                     f"`/kimi drill approve {view.id}` or `/kimi drill reject {view.id} REASON`.", ephemeral=False)
    if parsed.action == "reject":
        view = decide_drill(ctx, identity, parsed.drill, approve=False, reason=parsed.reason)
        return reply(f"Drill #{view.id} ({view.kind} on *{view.endpoint}*) rejected: {literal(view.reason)}", ephemeral=False)
    view = decide_drill(ctx, identity, parsed.drill, approve=True)

    def go() -> Reply:
        ended = run_drill(ctx, view.id)  # its result is said in the endpoint's channel as well
        return reply(ended.line, ephemeral=False)

    return reply(f"Drill #{view.id} ({view.kind} on *{view.endpoint}*) approved; it runs now and its result follows "
                 "in the endpoint's channel.", ephemeral=False, then=go)
