"""The sides of a pair service: which side users are on (as the database records it), who pages for them after
go-live (one watcher for both), and the fast path back.

Below :mod:`bot.services.pairs` (the use cases that move users between sides) so that what those use cases call
after a move (the Prometheus rules of :mod:`bot.services.alert_rules`, the metrics watch, the incident pages) may
ask which side users are on without importing the use cases back.

A side "has users" when its endpoint row records admission ``open`` and it has a live deployment; when both
do (never after a ramp, which closes the other side in the transaction that makes the candidate live), the
newer live deployment wins.
"""

from __future__ import annotations

from bot.adapters.store.models import Endpoint
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings, ServiceSettings
from bot.domain.states import State
from bot.domain.watchers import BUILTIN, ServiceWatch
from bot.services.context import Context
from bot.services.errors import NotFound


def fast_path(endpoint: EndpointSettings) -> str:
    """What every alert about a pair side ends with: the rollback that takes seconds ("" for a single node)."""
    if endpoint.pair is None:
        return ""
    return (f" Fast path back: `/kimi rollback {endpoint.pair.service}` (one route change to the side kept warm).")


def service_settings(ctx: Context, name: str | None) -> ServiceSettings | None:
    """The service called ``name``, or None when it names no service (an endpoint, or nothing)."""
    return ctx.settings.service(name) if name else None


def service_watch(ctx: Context, service: ServiceSettings) -> ServiceWatch:
    """Each side's ``slo.alerting`` as set, and so the service's one watcher (:mod:`bot.domain.watchers`)."""
    def alerting(side: str) -> str:
        spec = ctx.settings.endpoint(side)
        return spec.slo.alerting if spec is not None else BUILTIN

    return ServiceWatch(service.name, tuple((side, alerting(side)) for side in service.endpoints))


def side_watch(ctx: Context, spec: EndpointSettings) -> ServiceWatch | None:
    """The watch of the service ``spec`` is a side of; None for a single node."""
    service = ctx.settings.service(spec.pair.service) if spec.pair is not None else None
    return service_watch(ctx, service) if service is not None else None


def effective_alerting(ctx: Context, spec: EndpointSettings) -> str:
    """Who pages for ``spec`` after go-live: its ``slo.alerting``, but a side of a pair is on Prometheus only once
    both sides are (the metrics watch, the rules kimi-ops applies and Alertmanager's intake all follow this)."""
    watch = side_watch(ctx, spec)
    return watch.effective if watch is not None else spec.slo.alerting


def side_rows(uow: SqlUnitOfWork, service: ServiceSettings) -> list[Endpoint]:
    """Both sides' endpoint rows, in the settings' order; refused when a side is not in the database yet."""
    rows = []
    for name in service.endpoints:
        row = uow.endpoints.get(name)
        if row is None:
            raise NotFound(f"service {service.name}'s side {name} is not in the database yet; restart kimi-ops "
                           "after declaring it (settings are synced at start)")
        rows.append(row)
    return rows


def _live_id(uow: SqlUnitOfWork, row: Endpoint) -> int | None:
    lives = uow.deployments.in_states(row.id, [State.LIVE])
    return lives[0].id if lives else None


def users_side(uow: SqlUnitOfWork, service: ServiceSettings) -> Endpoint | None:
    """The side users are on: admission open with a live release (the newer one if both); None before any."""
    ranked = [(live, row) for row in side_rows(uow, service)
              if row.admission == "open" and (live := _live_id(uow, row)) is not None]
    return max(ranked, key=lambda pair: pair[0])[1] if ranked else None
