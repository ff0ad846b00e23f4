"""``/kimi gates [--page N]``: the gates waiting for a decision that I may make, each with its report and buttons.

The buttons of all listed gates end up together below the reports (the
renderer keeps every button while it trims content to Slack's limits), so each
button names its deployment and gate: with two gates waiting, a bare "Approve"
would not say which one it decides. ``PAGE_GATES`` gates a page, so a page fits
one Slack message however many gates wait; a "Next" button asks for the next.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bot.bootstrap import Root
from bot.services.access import Identity, authorize
from bot.services.deployments import pending_gates
from bot.views.actions import GateTicket
from bot.views.gates import gate_parts
from bot.views.parts import Buttons, Note, Part, Reply, Text, plain
from commands.base import Usage, extra
from commands.paging import next_button, take_page

NAME = "gates"
USAGE = "/kimi gates [--page N]"
HELP = "Show the gates waiting for your decision, with Approve and Reject buttons (5 a page)."
PAGE_GATES = 5


@dataclass(frozen=True)
class Args:
    page: int = 1


def parse(args: list[str]) -> Args:
    rest, page = take_page(list(args), USAGE)
    if rest:
        raise Usage(USAGE, extra(rest))
    return Args(page)


def run(root: Root, identity: Identity, parsed: Args) -> Reply:
    ctx = root.ctx
    authorize(ctx, identity, "decide", "gates")
    waiting = pending_gates(ctx, identity)
    first = (parsed.page - 1) * PAGE_GATES
    shown = waiting[first:first + PAGE_GATES]
    parts: list[Part] = []
    for p in shown:
        ticket = GateTicket(p.deployment_id, p.gate, p.report_hash, p.release_hash)
        for part in gate_parts(p.report, deployment_id=p.deployment_id, release=p.release_name, endpoint=p.endpoint,
                               actors=p.actors, ticket=ticket, above_limits=p.above_limits):
            if isinstance(part, Buttons):
                part = Buttons(tuple(replace(b, label=f"{b.label} #{p.deployment_id} {p.gate}") for b in part.buttons))
            parts.append(part)
    if not parts:
        text = "No gate is waiting for you." if not waiting else f"No gates on page {parsed.page}; {len(waiting)} wait for you."
        parts = [Text(text)]
    elif len(waiting) > PAGE_GATES:
        parts.append(Note(f"Gates {first + 1}–{first + len(shown)} of {len(waiting)} waiting for you."))
        if first + PAGE_GATES < len(waiting):
            upto = min(len(waiting), first + 2 * PAGE_GATES)
            parts.append(next_button("gates", parsed.page + 1, f"{first + PAGE_GATES + 1}–{upto} of {len(waiting)}"))
    return Reply(parts=tuple(parts), text=plain(parts))
