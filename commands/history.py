"""``/kimi history [ENDPOINT] [N] [--page P]``: an endpoint's deployments, newest first, with who requested and approved.

The last N deployments are shown ``PAGE_ROWS`` at a time, so a page always fits
one Slack message; a "Next" button asks for the following page.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.bootstrap import Root
from bot.domain.chat_text import stored_reason
from bot.domain.states import State
from bot.services.access import Identity, authorize
from bot.services.deployments import history, resolve_endpoint
from bot.views.deployments import state_words
from bot.views.parts import Heading, Note, Part, Reply, Text, person, plain
from commands.base import Usage, at, extra
from commands.paging import next_button, number, take_page

NAME = "history"
USAGE = "/kimi history [ENDPOINT] [N] [--page P]"
HELP = "List an endpoint's last N deployments (default 10), 10 a page: release, outcome, requester, approvers."
MAX = 50
QUIET_ENDS = (State.LIVE, State.SUPERSEDED)
PAGE_ROWS = 10


@dataclass(frozen=True)
class Args:
    endpoint: str | None
    limit: int
    page: int = 1


def parse(args: list[str]) -> Args:
    rest, page = take_page(list(args), USAGE)
    endpoint, limit = None, 10
    if rest and not rest[0].isdigit():
        endpoint = rest.pop(0)
    if rest:
        if len(rest) > 1:
            raise Usage(USAGE, extra(rest[1:]))
        limit = min(number(rest[0], USAGE), MAX)
    if (page - 1) * PAGE_ROWS >= limit:
        raise Usage(USAGE, f"page {page} is past the last {limit} deployments")
    return Args(endpoint, limit, page)


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    ctx = root.ctx
    name = resolve_endpoint(ctx, parsed.endpoint)
    authorize(ctx, identity, "view", f"endpoint:{name}")
    first = (parsed.page - 1) * PAGE_ROWS
    last = min(parsed.limit, first + PAGE_ROWS)
    # One row more than this page shows tells whether there is a next page.
    views = history(ctx, name, min(parsed.limit, last + 1))
    lines = []
    for v in views[first:last]:
        approvers = ", ".join(f"{g.gate} {person(g.decided_by)}" for g in v.gates if g.decision == "approved" and g.decided_by)
        # Why it ended (a rejection's reason, a failure, a cancel) stays beside it; live and superseded need no why.
        ended = v.state_reason and v.state.terminal and v.state not in QUIET_ENDS
        why = f"\n>{stored_reason(v.state_reason, v.actors)}" if ended else ""
        lines.append(f"*#{v.id}* {v.kind} of *{v.release}* — {state_words(v.state)} · {at(v.created_at)} · "
                     f"by {person(v.requested_by)}" + (f" · approved: {approvers}" if approvers else "") + why)
    parts: list[Part] = [Heading(f"History of {name}"), Text("\n".join(lines) or "No deployments yet.")]
    more = len(views) > last
    if parsed.page > 1 or more:
        parts.append(Note(f"Deployments {first + 1}–{first + len(lines)}, newest first (page {parsed.page})."))
    if more:
        upto = min(parsed.limit, last + PAGE_ROWS)
        parts.append(next_button(f"history {name} {parsed.limit}", parsed.page + 1, f"{last + 1}–{upto}"))
    return Reply(parts=tuple(parts), text=plain(parts))
