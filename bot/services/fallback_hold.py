"""Where a failover holds users on the fallback now, as status says it (the service line and both sides' rows).

While an endpoint's ``failover`` incident is open (:mod:`bot.services.failover`), its route sends every user to the
smaller fallback model. A status page must say so, and since when, on the endpoint that stopped answering and, on a
pair, on its other side too (whose route reads back closed as well, but whose users are not on it either): "closed"
alone reads like a deploy's closing, and a pair's split read back from the route would put them on the other side.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.chat_text import literal
from bot.domain.drift import ClusterTruth
from bot.services.admission import FAILOVER
from bot.services.status import users_get_words


@dataclass(frozen=True)
class FallbackHold:
    """Users moved to the fallback because ``endpoint`` stopped answering, since ``since``."""

    endpoint: str  # the side (or single endpoint) that stopped answering
    service: str | None  # its service, on a pair
    fallback: str  # the fallback model's Service
    since: dt.datetime
    why: str  # the incident that moved them, as the failover recorded it (``readiness: not answering …``)

    @property
    def words(self) -> str:
        who = f"users of {self.service}" if self.service else "users"
        return (f"{who} are on the fallback ({self.fallback}) since {self.since:%Y-%m-%d %H:%M} UTC: {self.endpoint} "
                f"stopped answering ({literal(self.why)}); kimi-ops moves them back to {self.endpoint} once its "
                "readiness suite passes")


def fallback_holds(uow: SqlUnitOfWork, specs: dict[str, EndpointSettings]) -> dict[str, FallbackHold]:
    """Every endpoint of ``specs`` (name → settings) whose users a failover holds on the fallback: the one that stopped
    answering and, on a pair, its other side (the service's users are on neither)."""
    rows = {row.id: row.name for row in uow.endpoints.list()}
    holds: dict[str, FallbackHold] = {}
    for endpoint_id, incidents in uow.incidents.open_by_endpoint([FAILOVER]).items():
        name = rows.get(endpoint_id)
        spec = specs.get(name) if name is not None else None
        if spec is None or not incidents:
            continue
        moved = spec.on_fallback()
        fallback = moved.route.fallback.name if moved.route is not None and moved.route.fallback is not None else "?"
        hold = FallbackHold(endpoint=spec.name, service=spec.pair.service if spec.pair else None, fallback=fallback,
                            since=incidents[0].opened_at, why=incidents[0].reason.removeprefix("failover: "))
        holds[spec.name] = hold
        if spec.pair is not None:
            holds.setdefault(spec.pair.partner, hold)
    return holds


def held(truth: ClusterTruth, spec: EndpointSettings, hold: FallbackHold | None) -> ClusterTruth:
    """``truth`` as status shows it while ``hold`` keeps users on the fallback: the closed route read as the fallback
    (not a pair's other side) and the hold said; unchanged without one."""
    if hold is None:
        return truth
    words = users_get_words(spec.on_fallback(), truth.observed.admission) if truth.observed is not None else None
    return replace(truth, users_get=words, on_fallback=hold.words)
