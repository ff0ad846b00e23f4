"""``/kimi history [ENDPOINT] [N]``: an endpoint's deployments, newest first, with who requested and approved."""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.services.access import Identity, authorize
from bot.services.deployments import history, resolve_endpoint
from bot.views.deployments import state_words
from bot.views.parts import Heading, Reply, Text, plain
from commands.base import Usage, at

NAME = "history"
USAGE = "/kimi history [ENDPOINT] [N]"
HELP = "List an endpoint's last N deployments (default 10): release, outcome, requester, approvers."
MAX = 50


@dataclass(frozen=True)
class Args:
    endpoint: str | None
    limit: int


def parse(args: list[str]) -> Args:
    endpoint, limit = None, 10
    rest = list(args)
    if rest and not rest[0].isdigit():
        endpoint = rest.pop(0)
    if rest:
        if not rest[0].isdigit() or int(rest[0]) < 1 or len(rest) > 1:
            raise Usage(USAGE)
        limit = min(int(rest[0]), MAX)
    return Args(endpoint, limit)


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    ctx = root.ctx
    name = resolve_endpoint(ctx, parsed.endpoint)
    authorize(ctx, identity, "view", f"endpoint:{name}")
    views = history(ctx, name, parsed.limit)
    lines = []
    for v in views:
        approvers = ", ".join(f"{g.gate} <@{g.decided_by}>" for g in v.gates if g.decision == "approved" and g.decided_by)
        lines.append(f"*#{v.id}* {v.kind} of *{v.release}* — {state_words(v.state)} · {at(v.created_at)} · "
                     f"by <@{v.requested_by}>" + (f" · approved: {approvers}" if approvers else ""))
    parts = (Heading(f"History of {name}"), Text("\n".join(lines) or "No deployments yet."))
    return Reply(parts=parts, text=plain(parts))
