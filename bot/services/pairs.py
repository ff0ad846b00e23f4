"""Services: one name users call, one HTTPRoute, a pair of endpoints behind it (blue/green).

Each side is an ordinary endpoint (its own node and reservation) whose route is the service's, written with
its own Service as the model backend and the other side's as the fallback (``bot/config/service.py`` derives it), so
the single-node procedure runs on a side unchanged: ``closing`` sends every user to the other side, the gates
run with no user traffic, the ramp shifts the weight step by step, and an ending after apply sends all of it
back in one route change. This module answers the questions that concern both sides at once: which side a
deploy goes to (the one users are not on), what each side runs and gets (``/kimi status SERVICE``), and
``/kimi rollback SERVICE``, which moves every user back to the side kept warm in one route change.

Which side users are on is :mod:`bot.services.pair_sides`'s (below this module, so that the rules applied after a
move can ask it). ``/kimi rollback SERVICE``, the Roll back button on a side's page and ``kimi-ops rollback
SERVICE`` all come here, and the rollback applies the Prometheus rules that follow the users
(:func:`bot.services.alert_rules.apply_after_go_live`) itself, whichever entrypoint asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings, ServiceSettings
from bot.domain.admission import Admission, AdmissionError, parse_admission
from bot.domain.events import ServiceRolledBack
from bot.domain.read_models import RolledBack
from bot.domain.states import State
from bot.domain.watchers import ServiceWatch
from bot.logs import logger_for
from bot.services.access import Identity, authorize
from bot.services.admission import FAILOVER, AdmissionFailed, apply_admission, record_admission
from bot.services.alert_rules import apply_after_go_live
from bot.services.context import Context
from bot.services.errors import NotFound, Refused
from bot.services.fallback_hold import FallbackHold, fallback_holds
from bot.services.pair_sides import service_watch, side_rows, users_side
from bot.services.reservations import reservation_for

log = logger_for(__name__)


def _refuse_in_flight(uow: SqlUnitOfWork, service: ServiceSettings, then: str) -> None:
    for row in side_rows(uow, service):
        holder = uow.deployments.in_flight(row.id)
        if holder is not None:
            raise Refused(f"deployment #{holder.id} ({holder.kind} of {holder.release.name}, {State(holder.state).words}) "
                          f"is in flight on {row.name}, a side of {service.name}; {then}")


def _refuse_on_fallback(uow: SqlUnitOfWork, service: ServiceSettings, then: str) -> None:
    """While a side's failover holds users on the service's smaller fallback, a deploy's closing would move them onto
    a side nobody checked, and a rollback has no side users are on to move them from (kimi-ops would move them back
    at its fail back): refused until they are back (kimi-ops fails back, or an admin opens the side)."""
    for row in side_rows(uow, service):
        if uow.incidents.open_for(row.id, FAILOVER) is not None:
            raise Refused(f"users of {service.name} are on its fallback since {row.name} stopped answering; {then} once "
                          f"they are back on {row.name} (kimi-ops moves them when its readiness passes, or "
                          f"`/kimi admission open {row.name} --reason …`)")


def deploy_side(ctx: Context, service: ServiceSettings) -> str:
    """The side a deploy to ``service`` goes to: the one users are not on (the first side before any deploy)."""
    with ctx.uow() as uow:
        _refuse_in_flight(uow, service, "one deployment per service at a time: wait for it or cancel it")
        _refuse_on_fallback(uow, service, "deploy")
        found = users_side(uow, service)
        active = found.name if found is not None else None
    first, second = service.endpoints
    if active is None:
        return first
    return second if active == first else first


def rollback_service(ctx: Context, name: str, actor: Identity) -> RolledBack:
    """Every user back on the side kept warm, in one route change, then the Prometheus rules that follow them;
    refused unless that side runs a release that passed its gates (its newest deployment is live) and nothing is in
    flight on either side."""
    service = ctx.settings.service(name)
    if service is None:
        raise NotFound(f"no service named {name}")
    authorize(ctx, actor, "rollback", f"service:{name}")
    with ctx.uow() as uow:
        _refuse_in_flight(uow, service, "cancel it instead: a cancel returns all weight to the other side at once")
        _refuse_on_fallback(uow, service, "roll back")
        active = users_side(uow, service)
        if active is None:
            raise Refused(f"no side of {name} has users yet; nothing to roll back")
        previous = next(r for r in side_rows(uow, service) if r.id != active.id)
        newest = uow.deployments.for_endpoint(previous.id, 1)
        if not newest or newest[0].state != State.LIVE:
            what = f"its last deployment #{newest[0].id} {State(newest[0].state).words}" if newest else "it never ran a release"
            raise Refused(f"{previous.name} does not run a release that passed its gates ({what}); "
                          f"there is no warm side to roll {name} back to")
        release = newest[0].release.name
        target = EndpointSettings.model_validate(previous.settings)
        active_name, previous_name = active.name, previous.name
    reason = f"rollback of {name} to {previous_name} ({release}) by {actor.user_id}"
    try:
        words = apply_admission(ctx, target, Admission.open(), reason)  # the one route change
    except AdmissionFailed as exc:
        raise Refused(f"the route was not changed: {exc}") from None
    with ctx.uow() as uow:
        record_admission(uow, ctx, previous_name, Admission.open(), reason, actor=actor.user_id, deployment_id=None,
                         words=words, announce=False)
        record_admission(uow, ctx, active_name, Admission.closed(), reason, actor=actor.user_id, deployment_id=None,
                         words=f"no user reaches it; it keeps its release for `/kimi rollback {name}`", announce=False)
        now = ctx.clock.now()
        uow.audit.record(at=now, actor=actor.user_id, action="service.rolled_back", subject=f"service:{name}",
                         details={"to": previous_name, "from": active_name, "release": release})
        announced = uow.events.emit(ServiceRolledBack(
            endpoint_name=previous_name, service=name, to_side=previous_name, from_side=active_name, release=release,
            actor=actor.user_id, text=f":rewind: {name} rolled back by {actor.user_id} in one route change: {words} "
                                      f"({release}). {active_name} keeps its release with no users."), at=now)
        uow.commit()
        said_at = f"event:{announced.id}"
    # The service's own page (and the side's) now carry the side users are on and its release: applied here, whoever
    # asked (a refusal is audited and said under the rollback's message; the rollback stands).
    apply_after_go_live(ctx, previous_name, reply_to=said_at, moment=f"{name} rolled back to {previous_name}")
    return RolledBack(service=name, to_side=previous_name, from_side=active_name, release=release, users_get=words)


# ---------------------------------------------------------------------------- status


@dataclass(frozen=True)
class SideStatus:
    endpoint: str
    release: str | None  # the live release on that side (what passed its gates there)
    weight: int | None  # percent of the service's ordinary traffic the route sends there; None when unknown
    cohort: bool | None  # whether the internal cohort goes there
    admission: str
    users: bool
    in_flight: str | None
    reservation_left: str | None


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    route: str
    sides: tuple[SideStatus, ...]
    split_source: str  # "cluster" (read back from the route) or "record" (kimi-ops's record: the cluster did not answer)
    on_fallback: FallbackHold | None = None  # a side stopped answering: the service's users are on its fallback
    watch: ServiceWatch | None = None  # who pages for each side after go-live, and whether anything judges it whole


def _split(ctx: Context, first: EndpointSettings) -> tuple[int, bool] | None:
    """The first side's share of ordinary traffic and whether the cohort goes there, read back from the route.

    The route is read from the side that wrote it last (the other side's reading of a ramp is no admission of
    its own); None when the cluster does not answer or the route fits no state.
    """
    cluster = ctx.ports.cluster
    if cluster is None or first.pair is None:
        return None
    partner = ctx.settings.endpoint(first.pair.partner)
    for side, mine in ((first, True), (partner, False)):
        if side is None:
            continue
        try:
            status = cluster.route_status(side)
        except Exception:
            log.warning("route of %s unreadable for its status", side.name, exc_info=True)
            return None
        if status is not None and status.effective is not None:
            percent, cohort = status.effective.percent_for(cohort=False), status.effective.cohort_admitted
            return (percent, cohort) if mine else (100 - percent, not cohort)
    return None


def service_status(ctx: Context, name: str) -> ServiceStatus:
    """Both sides of a service: release, route weight, reservation time left, what is in flight, who pages."""
    service = ctx.settings.service(name)
    if service is None:
        raise NotFound(f"no service named {name}")
    with ctx.uow() as uow:
        rows = side_rows(uow, service)
        found_active = users_side(uow, service)
        active = found_active.name if found_active is not None else None
        facts = []
        for row in rows:
            lives = uow.deployments.in_states(row.id, [State.LIVE])
            holder = uow.deployments.in_flight(row.id)
            flying = f"#{holder.id} {holder.kind} of {holder.release.name}, {State(holder.state).words}" if holder else None
            facts.append((row.name, EndpointSettings.model_validate(row.settings), row.admission,
                          lives[0].release.name if lives else None, flying))
        hold = fallback_holds(uow, {name: spec for name, spec, *_ in facts}).get(facts[0][0])
    split, source = _split(ctx, facts[0][1]), "cluster"
    if hold is not None:
        split = 0, False  # the route sends ordinary users to neither side (it reads back closed from both)
    if split is None:
        source = "record"
        try:
            recorded = parse_admission(facts[0][2])
            split = recorded.percent_for(cohort=False), recorded.cohort_admitted
        except AdmissionError:
            split = None
    sides = []
    for index, (side, settings, admission, release, flying) in enumerate(facts):
        weight: int | None = None
        cohort: bool | None = None
        if split is not None:
            weight = split[0] if index == 0 or hold is not None else 100 - split[0]
            cohort = split[1] if index == 0 or hold is not None else not split[1]
        try:
            found = reservation_for(ctx, settings, fresh=False)
        except Exception:
            log.warning("reservation of %s unreadable for its status", side, exc_info=True)
            found = None
        left = None
        if found is not None and found.end is not None:
            hours = max(0, int((found.end - ctx.clock.now()).total_seconds() // 3600))
            left = f"{hours // 24} d {hours % 24} h"
        sides.append(SideStatus(endpoint=side, release=release, weight=weight, cohort=cohort, admission=admission,
                                users=active == side, in_flight=flying, reservation_left=left))
    where = f"{facts[0][1].namespace}/{name}"
    return ServiceStatus(name=name, route=where, sides=tuple(sides), split_source=source, on_fallback=hold,
                         watch=service_watch(ctx, service))
