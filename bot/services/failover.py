"""The fallback when Kimi K3 fails on a live endpoint: the route closes to the fallback by itself, and reopens.

After each readiness probe and metrics watch round (:mod:`bot.services.scheduling`), :func:`failover_round`
looks at every live endpoint whose route has a smaller fallback model. On a pair (a service of two sides) that is
the service's ``route.fallback``, never the other side, which may hold an older release or none checked: the side
users are on writes the service's route with that model in its partner's place (:meth:`EndpointSettings.on_fallback`)
and the rest is the same:

* **fail over.** While the endpoint is open to users and one of its incidents says Kimi K3 stopped answering
  (the readiness probe's ``readiness``, the metrics watch's ``node`` or ``crashloop``) and no deployment is in
  flight, the route is closed (everyone gets the fallback; requests that need Kimi K3 the gateway's
  unavailable answer), recorded and audited like any admission change, a ``failover`` incident is opened (its
  ``opened_at`` is when users went to the fallback) and the reason is posted in the triggering incident's
  thread (the channel when that alert has none);
* **fail back.** While the ``failover`` incident is open, the readiness suite (``/health``, ``/v1/models`` and a
  streamed completion, straight to the model) is run; only when it passes is the route opened again, the
  incident closed with how long users were on the fallback (audit ``on_fallback_seconds``), said in the same
  thread.

An admin holds the endpoint on the fallback with ``/kimi admission close ENDPOINT --reason …``: an admission
changed by a person since the failover is theirs, and kimi-ops does not reopen it (``/kimi admission open``
does, and ends the failover incident with its duration).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from bot.adapters.store.models import Endpoint, Incident
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.admission import Admission
from bot.domain.chat_text import literal
from bot.domain.events import FailoverNotice
from bot.logs import logger_for
from bot.services.admission import FAILOVER, AdmissionFailed, apply_admission, end_failover, record_admission
from bot.services.context import Context
from bot.services.transitions import live_deployment

log = logger_for(__name__)

ACTOR = "kimi-ops:failover"
TRIGGERS = ("readiness", "node", "crashloop")
"""The incidents that say Kimi K3 stopped answering: the readiness probe's, and the metrics watch's direct pages."""


@dataclass(frozen=True)
class FailoverOutcome:
    endpoint: str
    action: str  # "failed over", "failed back", "held", "still failing", or why nothing happened

    @property
    def line(self) -> str:
        return f"{self.endpoint}: {self.action}"


def guarded(spec: EndpointSettings) -> bool:
    """Endpoints whose users can be moved to a smaller fallback model (a pair side: its service's)."""
    return spec.on_fallback().smaller_fallback


def _spec(ctx: Context, row: Endpoint) -> EndpointSettings:
    return ctx.settings.endpoint(row.name) or EndpointSettings.model_validate(row.settings)


@dataclass(frozen=True)
class Seen:
    """An open incident as read in the round's first transaction (its row is not used outside it)."""

    id: int
    kind: str
    reason: str
    opened_at: dt.datetime


def _trigger(uow: SqlUnitOfWork, row: Endpoint) -> Seen | None:
    found = list(uow.incidents.open_of(row.id, TRIGGERS))
    first = min(found, key=lambda i: i.opened_at) if found else None
    return None if first is None else Seen(first.id, first.kind, first.reason, first.opened_at)


def _post(uow: SqlUnitOfWork, spec: EndpointSettings, about: int | None, text: str, at: dt.datetime) -> None:
    uow.events.emit(FailoverNotice(endpoint_name=spec.name, channel=spec.channel, text=text, incident_id=about), at=at)


def _moved_by(uow: SqlUnitOfWork, endpoint_name: str) -> int | None:
    """The incident whose thread the last failover was said in (the fail back is said there too, even once the watch
    closed it); None for a failover recorded before the trigger's id was."""
    opened = [d for (_action, _actor, _at, d) in uow.audit.actions(f"endpoint:{endpoint_name}", "incident.opened")
              if d.get("kind") == FAILOVER]
    found = opened[0].get("trigger_id") if opened else None
    return int(found) if found is not None else None


def _fail_over(ctx: Context, spec: EndpointSettings, trigger: Seen) -> str:
    reason = f"failover: {trigger.kind}: {trigger.reason}"
    try:
        words = apply_admission(ctx, spec.on_fallback(), Admission.closed(), reason)
    except AdmissionFailed as exc:
        log.warning("failover of %s could not close its route: %s", spec.name, exc)
        return f"could not fail over ({exc})"
    now = ctx.clock.now()
    with ctx.uow() as uow:
        row = uow.endpoints.get(spec.name)
        assert row is not None
        record_admission(uow, ctx, spec.name, Admission.closed(), reason, actor=ACTOR, deployment_id=None, words=words,
                         announce=False)
        uow.incidents.add(Incident(endpoint_id=row.id, kind=FAILOVER, open=True, reason=reason, opened_at=now,
                                   severity="page"))
        uow.audit.record(at=now, actor=ACTOR, action="incident.opened", subject=f"endpoint:{spec.name}",
                         details={"kind": FAILOVER, "reason": reason, "trigger": trigger.kind,
                                  "trigger_id": trigger.id})
        _post(uow, spec, trigger.id, f":twisted_rightwards_arrows: `{spec.name}`: Kimi K3 stopped answering ({trigger.kind}: "
                                  f"{literal(trigger.reason)}); the route is closed to the fallback: {words}. kimi-ops "
                                  "reopens it once the readiness suite passes again; `/kimi admission close "
                                  f"{spec.name} --reason …` holds it closed.", now)
        uow.commit()
    return "failed over"


def _last_failover_ended(uow: SqlUnitOfWork, endpoint_name: str) -> dt.datetime | None:
    ended = [at for (_action, _actor, at, details) in uow.audit.actions(f"endpoint:{endpoint_name}", "incident.closed")
             if details.get("kind") == FAILOVER]
    return max(ended, default=None)


def on_fallback_seconds(uow: SqlUnitOfWork, endpoint_name: str) -> float | None:
    """How long users were on the fallback in the endpoint's last ended failover (None: none has ended)."""
    ended = [(at, details) for (_action, _actor, at, details) in uow.audit.actions(f"endpoint:{endpoint_name}",
                                                                                   "incident.closed")
             if details.get("kind") == FAILOVER and details.get("on_fallback_seconds") is not None]
    return float(max(ended, key=lambda e: e[0])[1]["on_fallback_seconds"]) if ended else None


def _held(uow: SqlUnitOfWork, spec: EndpointSettings, since: dt.datetime) -> str | None:
    """Who took the endpoint's admission in hand since the failover (an audited change by a person), if anyone."""
    newest = next(iter(uow.audit.actions(f"endpoint:{spec.name}", "endpoint.admission")), None)
    if newest is None or newest[2] < since:
        return None
    return newest[1] if newest[1] != ACTOR else None


def _fail_back(ctx: Context, spec: EndpointSettings) -> str:
    client = ctx.ports.endpoint
    if client is None:
        return "no endpoint client to run the readiness suite"
    try:
        result = client.readiness(spec)
    except Exception as exc:  # a result is what the adapter gives; an exception is a failed suite all the same
        return f"still failing ({type(exc).__name__})"
    if not result.ok:
        return f"still failing (readiness {result.summary})"
    reason = f"failback: the readiness suite passes again ({result.summary})"
    try:
        words = apply_admission(ctx, spec, Admission.open(), reason)
    except AdmissionFailed as exc:
        return f"could not fail back ({exc})"
    now = ctx.clock.now()
    with ctx.uow() as uow:
        record_admission(uow, ctx, spec.name, Admission.open(), reason, actor=ACTOR, deployment_id=None, words=words,
                         announce=False)
        on_fallback = end_failover(uow, spec.name, now, ACTOR)
        row = uow.endpoints.get(spec.name)
        trigger = _trigger(uow, row) if row is not None else None
        about = _moved_by(uow, spec.name) or (trigger.id if trigger is not None else None)
        _post(uow, spec, about, f":large_green_circle: `{spec.name}`: the readiness suite passes again; users are "
                                  f"back on Kimi K3 after {on_fallback} on the fallback.", now)
        uow.commit()
    return "failed back"


def failover_round(ctx: Context) -> list[FailoverOutcome]:
    """Fail over every live guarded endpoint Kimi K3 stopped answering on, and fail back those that answer again."""
    outcomes: list[FailoverOutcome] = []
    with ctx.uow() as uow:
        rows = uow.endpoints.list()
        plans: list[tuple[EndpointSettings, str, Seen | None]] = []
        for row in rows:
            spec = _spec(ctx, row)
            if not guarded(spec) or live_deployment(uow, row.id) is None:
                continue
            failing_over = uow.incidents.open_for(row.id, FAILOVER)
            if failing_over is not None:
                holder = _held(uow, spec, failing_over.opened_at)
                plans.append((spec, f"held closed by {holder}" if holder else "back", None))
            elif row.admission_open and uow.deployments.in_flight(row.id) is None:
                trigger = _trigger(uow, row)
                ended = _last_failover_ended(uow, spec.name)
                # One failover per incident: one still open from before the last fail back (the suite passed since,
                # the watches have not looked again yet) does not move users a second time.
                if trigger is not None and (ended is None or trigger.opened_at > ended):
                    plans.append((spec, "over", trigger))
    for spec, plan, trigger in plans:
        if plan == "over" and trigger is not None:
            outcomes.append(FailoverOutcome(spec.name, _fail_over(ctx, spec, trigger)))
        elif plan == "back":
            outcomes.append(FailoverOutcome(spec.name, _fail_back(ctx, spec)))
        else:
            outcomes.append(FailoverOutcome(spec.name, plan))
    return outcomes
