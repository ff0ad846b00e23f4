"""One answer per Slack request across replicas: the first replica to claim a request's key handles it.

Several replicas share one Slack app, so a request can reach more than one of
them (a replay, a redelivery after a lost acknowledgement, a load balancer's
retry). Each replica claims the request's key in the shared database before
handling it (:meth:`bot.adapters.store.deliveries.DeliveryRepository.claim`);
exactly one claim wins. What the key is belongs to the Slack edge
(:func:`bot.slack.middleware.replay_guard.delivery_key`).

Keys are kept for :data:`DELIVERY_MEMORY`: Slack refuses nothing older than its
5-minute signature window itself, but it redelivers an unacknowledged event up
to three times (at once, after 1 minute, after 5 minutes), each with a fresh
timestamp, so the last retry may come about 6 minutes after the original.
"""

from __future__ import annotations

import datetime as dt

from bot.services.context import Context

DELIVERY_MEMORY = dt.timedelta(minutes=10)


def first_delivery(ctx: Context, key: str) -> bool:
    """Claim ``key`` for this replica: ``True`` the first time any replica asks, ``False`` after."""
    with ctx.uow() as uow:
        first = uow.deliveries.claim(key, ctx.clock.now())
        uow.commit()
    return first


def forget_old_deliveries(ctx: Context) -> int:
    """Drop the keys older than :data:`DELIVERY_MEMORY` (no redelivery can still come for them); how many went."""
    with ctx.uow() as uow:
        gone = uow.deliveries.forget_before(ctx.clock.now() - DELIVERY_MEMORY)
        uow.commit()
    return gone
