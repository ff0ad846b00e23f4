"""What a metrics-watch incident's buttons do: acknowledge, silence for a while with a reason, roll back.

The button carries the incident's id; the services authorise the clicker and audit the change. Roll back
asks for the same rollback ``/kimi rollback ENDPOINT`` asks for, so its rules (approvals, re-verified
weights, one deployment in flight) apply unchanged.
"""

from __future__ import annotations

from bot.bootstrap import Root
from bot.services import incidents
from bot.services.access import Identity
from bot.services.context import Context
from bot.services.errors import NotFound, Refused
from bot.views.parts import Reply, reply
from commands import rollback
from commands.base import number_words, storable


def incident_id(value: str | None) -> int:
    try:
        number = int(value or "")
    except ValueError:
        raise Refused("this button no longer says which incident it is about; use `/kimi status ENDPOINT`") from None
    if not storable(number):
        raise NotFound(f"no incident {number_words(number)}; `/kimi status ENDPOINT` lists the open ones")
    return number


def acknowledge(ctx: Context, identity: Identity, value: str | None) -> Reply:
    return reply(incidents.acknowledge(ctx, identity, incident_id(value)))


def silence(ctx: Context, identity: Identity, value: str | None, hours: str | None, why: str) -> Reply:
    try:
        duration = float(hours or "")
    except ValueError:
        raise Refused("choose how long to silence the alert for") from None
    return reply(incidents.silence(ctx, identity, incident_id(value), duration, why))


def roll_back(root: Root, identity: Identity, value: str | None) -> Reply:
    endpoint = incidents.rollback_target(root.ctx, incident_id(value))
    return rollback.run(root, identity, rollback.Args(endpoint, None))
