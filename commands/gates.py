"""``/kimi gates``: the gates waiting for a decision that I may make, each with its report and buttons.

The buttons of all listed gates end up together below the reports (the
renderer keeps every button while it trims content to Slack's limits), so each
button names its deployment and gate: with two gates waiting, a bare "Approve"
would not say which one it decides.
"""

from __future__ import annotations

from dataclasses import replace

from bot.bootstrap import Root
from bot.services.access import Identity, authorize
from bot.services.deployments import pending_gates
from bot.views.actions import GateTicket
from bot.views.gates import gate_parts
from bot.views.parts import Buttons, Part, Reply, Text, plain
from commands.base import Usage

NAME = "gates"
USAGE = "/kimi gates"
HELP = "Show the gates waiting for your decision, with Approve and Reject buttons."


def parse(args: list[str]) -> None:
    if args:
        raise Usage(USAGE)


def run(root: Root, identity: Identity, parsed: None) -> Reply:
    ctx = root.ctx
    authorize(ctx, identity, "decide", "gates")
    parts: list[Part] = []
    for p in pending_gates(ctx, identity):
        ticket = GateTicket(p.deployment_id, p.gate, p.report_hash, p.release_hash)
        for part in gate_parts(p.report, deployment_id=p.deployment_id, release=p.release_name, endpoint=p.endpoint,
                               ticket=ticket):
            if isinstance(part, Buttons):
                part = Buttons(tuple(replace(b, label=f"{b.label} #{p.deployment_id} {p.gate}") for b in part.buttons))
            parts.append(part)
    if not parts:
        parts = [Text("No gate is waiting for you.")]
    return Reply(parts=tuple(parts), text=plain(parts))
