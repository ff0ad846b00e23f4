"""Admission: what the route in front of an endpoint lets through to Kimi K3, changed, proven and recorded.

Only the deployment engine and an admin's override change admission. A change
applies the endpoint's Gateway API HTTPRoute (or, for an endpoint declared
without a ``route:`` block, the admission ConfigMap the application layer
reads) and waits until every parent Gateway accepted the new generation of the
route: a change the gateway has not taken is not a change users see. The
endpoint row then records it (``admission``) with an audit row and an
announcement, inside the caller's transaction, so the engine's move to its next
state and the record of what users get commit together.

A restore or rollback that fails while users are closed out opens an
``admission-stuck`` incident that pages; :func:`override_admission` (admin,
with a reason) is how a person takes over, and reopening closes the incident.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

from bot.adapters.store.models import Incident
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.admission import Admission, AdmissionError, AdmissionState, parse_admission
from bot.domain.chat_text import literal
from bot.domain.drills import seconds
from bot.domain.events import AdmissionChanged, AdmissionStuck
from bot.domain.names import did_you_mean, match
from bot.services.access import Identity, authorize
from bot.services.context import Context, require
from bot.services.errors import Invalid, NotFound, Refused

STUCK = "admission-stuck"
FAILOVER = "failover"
"""Users on the fallback because Kimi K3 stopped answering on a live endpoint (bot/services/failover.py)."""
UNGUARDED = "users are not kept off the candidate"
ROUTE_POLL_SECONDS = 0.2  # the application layer's acknowledgement, read from its ConfigMap
ROUTE_RESYNC_SECONDS = 5.0  # the route is read again at least this often while the gateway's verdict is awaited


class AdmissionFailed(Exception):
    """The route (or admission ConfigMap) could not be changed, or the gateway did not take the change."""


@dataclass(frozen=True)
class AdmissionView:
    endpoint: str
    admission: str
    users_get: str


def users_get(endpoint: EndpointSettings, admission: Admission) -> str:
    """What an ordinary user's request reaches under ``admission``, in words."""
    route = endpoint.route
    if route is None:
        if endpoint.door.application_layer is None:
            return f"{UNGUARDED}: {endpoint.name} has no route and no application layer"
        if admission.state is AdmissionState.OPEN:
            return "everyone reaches Kimi K3"
        return "the application layer turns users away (admission ConfigMap closed; no route is configured)"
    cohort = route.cohort_header.describe(route.route_name(endpoint.name))
    if endpoint.pair is not None and not endpoint.smaller_fallback:
        here, there = endpoint.name, endpoint.pair.partner
        return {AdmissionState.CLOSED: f"every user of {endpoint.pair.service} is on {there}; none reaches {here}",
                AdmissionState.INTERNAL: f"only the internal cohort ({cohort}) reaches {here}; other users stay on {there}",
                AdmissionState.SHARE: f"{admission.percent}% of users and the internal cohort reach {here}; "
                                      f"{100 - admission.percent}% stay on {there}",
                AdmissionState.OPEN: f"every user of {endpoint.pair.service} is on {here}"}[admission.state]
    fallback = f"the fallback model ({route.fallback.name})" if route.fallback is not None else "the gateway's unavailable answer"
    if admission.state is AdmissionState.CLOSED:
        return f"users get {fallback}; no user request reaches Kimi K3"
    if admission.state is AdmissionState.INTERNAL:
        return f"only the internal cohort ({cohort}) reaches Kimi K3; other users get {fallback}"
    if admission.state is AdmissionState.SHARE:
        return f"{admission.percent}% of users and the internal cohort reach Kimi K3; the rest get {fallback}"
    return "everyone reaches Kimi K3"


def apply_admission(ctx: Context, endpoint: EndpointSettings, admission: Admission, reason: str) -> str:
    """Change what the route lets through and wait until the gateway took it; returns what users get now.

    Raises :class:`AdmissionFailed` with a one-line reason; nothing is recorded here (see :func:`record_admission`).
    """
    cluster = require(ctx.ports.cluster, "cluster access", "to change admission")
    if admission.needs_fallback and (endpoint.route is None or endpoint.route.fallback is None):
        raise AdmissionFailed(f"{admission} needs a fallback backend in {endpoint.name}'s route settings to send the rest to")
    try:
        if endpoint.route is None:
            generation = cluster.set_admission(endpoint, admission.state is AdmissionState.OPEN, reason)
            _await_application_layer(ctx, endpoint, admission, generation)
            return users_get(endpoint, admission)
        status = cluster.set_route(endpoint, admission, reason)
    except AdmissionFailed:
        raise
    except Exception as exc:
        raise AdmissionFailed(f"could not set {endpoint.name}'s route to {admission}: {exc}") from exc
    deadline = time.monotonic() + endpoint.route_accept_seconds
    while True:
        if status.accepted and status.effective == admission:
            return users_get(endpoint, admission)
        refused = [p.gateway for p in status.parents if p.holds("Accepted", status.generation) is False]
        if refused:
            raise AdmissionFailed(f"gateway {', '.join(refused)} refused {endpoint.name}'s route: {status.summary}")
        if time.monotonic() >= deadline:
            raise AdmissionFailed(
                f"the gateway did not accept {endpoint.name}'s route ({admission}) within {endpoint.route_accept_seconds:.0f} s: "
                f"{status.summary}")
        # Watched, not slept on: the gateway's verdict is seen as it is written (ms, where a fixed pause cost 0.2 s).
        current = cluster.next_route_status(endpoint, status,
                                            max(0.05, min(ROUTE_RESYNC_SECONDS, deadline - time.monotonic())))
        if current is not None:
            status = current


def _await_application_layer(ctx: Context, endpoint: EndpointSettings, admission: Admission, generation: int) -> None:
    """The declared application layer must write back ``generation`` as enforced in time, or this fails closed and pages.

    Without a route the ConfigMap is only a request to the layer that holds the door: an unacknowledged change is
    not one users see. Failing closed writes ``closed`` again (it cannot be waited for: the layer is not answering)
    and opens the ``admission-stuck`` incident, which pages on-call until admission opens again.
    """
    layer = endpoint.door.application_layer
    if layer is None:
        return
    cluster = require(ctx.ports.cluster, "cluster access", "to change admission")
    deadline = time.monotonic() + layer.acknowledge_seconds
    while True:
        enforced = cluster.admission_enforced(endpoint)
        if enforced is not None and enforced >= generation:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(ROUTE_POLL_SECONDS)
    said = "nothing" if enforced is None else f"generation {enforced}"
    why = (f"the application layer ({layer.describe()}) did not acknowledge {endpoint.name}'s admission {admission} "
           f"(generation {generation}) within {layer.acknowledge_seconds:.0f} s; it enforces {said}")
    if admission.state is not AdmissionState.CLOSED:
        cluster.set_admission(endpoint, False, f"failed closed: {why}")
    with ctx.uow() as uow:
        open_stuck_incident(uow, ctx, endpoint.name, why)
        uow.commit()
    raise AdmissionFailed(why)


def record_admission(uow: SqlUnitOfWork, ctx: Context, endpoint_name: str, admission: Admission, reason: str, *,
                     actor: str, deployment_id: int | None, words: str, announce: bool = True) -> None:
    """Inside the caller's transaction: the endpoint row, an audit row and the announcement."""
    row = uow.endpoints.get(endpoint_name)
    if row is None:
        raise NotFound(f"no endpoint named {endpoint_name}")
    now = ctx.clock.now()
    before = row.admission
    row.admission = str(admission)
    row.admission_open = admission.state is AdmissionState.OPEN
    uow.audit.record(at=now, actor=actor, action="endpoint.admission", subject=f"endpoint:{endpoint_name}",
                     details={"from": before, "to": str(admission), "reason": reason, "deployment": deployment_id})
    if not announce:
        return
    uow.events.emit(AdmissionChanged(deployment_id=deployment_id, endpoint_name=endpoint_name, admission=str(admission),
                                     reason=reason, actor=actor, text=f"Admission of {endpoint_name} is now {admission}: "
                                     f"{words} ({literal(reason)})."), at=now)


def open_stuck_incident(uow: SqlUnitOfWork, ctx: Context, endpoint_name: str, reason: str) -> None:
    """Users are closed out and no deployment will reopen them: page, once per endpoint until admission opens."""
    row = uow.endpoints.get(endpoint_name)
    if row is None or uow.incidents.open_for(row.id, STUCK) is not None:
        return
    now = ctx.clock.now()
    uow.incidents.add(Incident(endpoint_id=row.id, kind=STUCK, open=True, reason=reason, opened_at=now))
    group = ctx.settings.oncall_group
    mention = f"<!subteam^{group}> " if group else ""
    text = (f"{mention}:rotating_light: {endpoint_name} stays closed to users: {literal(reason)}. Check the cluster, then "
            f"`/kimi rollback {endpoint_name}` or `/kimi admission open {endpoint_name} --reason …` (admin).")
    uow.audit.record(at=now, actor="kimi-ops", action="incident.opened", subject=f"endpoint:{endpoint_name}",
                     details={"kind": STUCK, "reason": reason})
    uow.events.emit(AdmissionStuck(endpoint_name=endpoint_name, incident=STUCK, reason=reason, text=text), at=now)


def _close_stuck_incident(uow: SqlUnitOfWork, ctx: Context, endpoint_name: str, actor: str = "kimi-ops") -> None:
    row = uow.endpoints.get(endpoint_name)
    incident = uow.incidents.open_for(row.id, STUCK) if row is not None else None
    if incident is not None:
        incident.open, incident.closed_at = None, ctx.clock.now()
        uow.audit.record(at=ctx.clock.now(), actor=actor, action="incident.closed", subject=f"endpoint:{endpoint_name}",
                         details={"kind": STUCK})


def end_failover(uow: SqlUnitOfWork, endpoint_name: str, now: dt.datetime, actor: str) -> str:
    """Close the endpoint's failover incident (:mod:`bot.services.failover`) in the caller's transaction; returns how
    long users were on the fallback, in words ("" when none was open). The fail back and an admin's reopening call it."""
    row = uow.endpoints.get(endpoint_name)
    incident = uow.incidents.open_for(row.id, FAILOVER) if row is not None else None
    if incident is None:
        return ""
    incident.open, incident.closed_at = None, now
    duration = now - incident.opened_at
    uow.audit.record(at=now, actor=actor, action="incident.closed", subject=f"endpoint:{endpoint_name}",
                     details={"kind": FAILOVER, "on_fallback_seconds": round(duration.total_seconds(), 1)})
    return seconds(duration)


def reopened(uow: SqlUnitOfWork, ctx: Context, endpoint_name: str) -> None:
    """Users are back on a release that passed its gates: any admission-stuck incident is over."""
    _close_stuck_incident(uow, ctx, endpoint_name)


def override_admission(ctx: Context, endpoint_name: str, word: str, reason: str, actor: Identity) -> AdmissionView:
    """An admin opens or closes an endpoint's admission by hand (audited), e.g. after a failed restore."""
    authorize(ctx, actor, "admission", f"endpoint:{endpoint_name}")
    if not reason.strip():
        raise Invalid("say why: `--reason …` is required to change admission by hand")
    try:
        admission = parse_admission("closed" if word.strip().lower() == "close" else word)
    except AdmissionError as exc:
        raise Refused(str(exc)) from None
    if admission.state not in (AdmissionState.OPEN, AdmissionState.CLOSED):
        raise Refused("by hand, admission is `open` or `close`; the internal cohort and shares belong to a deployment's ramp")
    with ctx.uow() as uow:
        names = [e.name for e in uow.endpoints.list()]
        declared = match(endpoint_name, names)
        row = uow.endpoints.get(declared) if declared is not None else None
        if row is None:
            known = ", ".join(names) or "none"
            hint = did_you_mean(endpoint_name, names) or ";"
            raise NotFound(f"no endpoint named {endpoint_name}{hint} known endpoints: {known}")
        endpoint_name = row.name
        endpoint = EndpointSettings.model_validate(row.settings)
        holder = uow.deployments.in_flight(row.id)
        if holder is not None:
            raise Refused(f"deployment #{holder.id} is in flight on {endpoint_name} and drives its admission; "
                          f"`/kimi cancel {holder.id}` first (a cancel after apply restores the previous release)")
        # Held during a failover, a pair side keeps its users on the service's smaller fallback, not the other side.
        if admission.state is AdmissionState.CLOSED and uow.incidents.open_for(row.id, FAILOVER) is not None:
            endpoint = endpoint.on_fallback()
    try:
        words = apply_admission(ctx, endpoint, admission, f"{reason} (by {actor.user_id})")
    except AdmissionFailed as exc:
        raise Refused(str(exc)) from None
    with ctx.uow() as uow:
        record_admission(uow, ctx, endpoint_name, admission, reason, actor=actor.user_id, deployment_id=None, words=words)
        if admission.state is AdmissionState.OPEN:
            _close_stuck_incident(uow, ctx, endpoint_name, actor.user_id)
            end_failover(uow, endpoint_name, ctx.clock.now(), actor.user_id)  # the admin ends the hold
        uow.commit()
    return AdmissionView(endpoint=endpoint_name, admission=str(admission), users_get=words)
