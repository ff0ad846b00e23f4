"""What every drill step shares: a drill as people read it, its endpoint, the admission rule, its notices."""

from __future__ import annotations

import datetime as dt
from typing import Any

from bot.adapters.store.models import Drill, Endpoint
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain import drills as rules
from bot.domain.admission import Admission, parse_admission
from bot.domain.drills import DrillView
from bot.domain.events import DrillNotice
from bot.domain.names import did_you_mean, match
from bot.services.context import Context
from bot.services.errors import NotFound, Refused
from bot.services.readiness import FAILING

ACTOR = "kimi-ops:drill"
ALERT_KINDS = (FAILING, "crashloop", "node")


def span_seconds(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds()


def view_of(row: Drill) -> DrillView:
    return DrillView(
        id=row.id, endpoint=row.endpoint.name, kind=row.kind, state=row.state, requested_by=row.requested_by,
        requested_at=row.requested_at, accept_user_impact=row.accept_user_impact, decided_by=row.decided_by,
        started_at=row.started_at, detection_seconds=span_seconds(row.started_at, row.detected_at),
        recovery_seconds=span_seconds(row.started_at, row.recovered_at), alerts=list(row.alerts or []), passed=row.passed,
        reason=row.reason, on_fallback_seconds=(row.details or {}).get("on_fallback_seconds"),
    )


def endpoint_row(uow: SqlUnitOfWork, name: str, *, lock: bool = False) -> Endpoint:
    """The endpoint named ``name`` in any case, or :class:`NotFound` with the closest names."""
    names = [e.name for e in uow.endpoints.list()]
    declared = match(name, names)
    row = None if declared is None else uow.endpoints.get_for_update(declared) if lock else uow.endpoints.get(declared)
    if row is None:
        raise NotFound(f"no endpoint named {name}{did_you_mean(name, names) or ''}; `/kimi status` lists them all")
    return row


def spec_of(ctx: Context, row: Endpoint) -> EndpointSettings:
    return ctx.settings.endpoint(row.name) or EndpointSettings.model_validate(row.settings)


def check_kind(kind: str) -> str:
    """The kind, lower-cased, or :class:`Refused` naming the closest and every kind."""
    wanted = kind.strip().lower()
    if wanted not in rules.KINDS:
        hint = did_you_mean(kind, rules.KINDS) or ""
        raise Refused(f"there is no drill kind {kind!r}{hint}; kinds: {', '.join(rules.KINDS)}")
    return wanted


def users_admitted(row: Endpoint) -> str | None:
    """What users get now, when they reach the model at all (None: closed out)."""
    try:
        admitted = parse_admission(row.admission or ("open" if row.admission_open else "closed"))
    except ValueError:
        return row.admission  # a word kimi-ops does not know: assume users may be there
    return None if admitted == Admission.closed() else str(admitted)


def refuse_user_impact(row: Endpoint, accepted: bool) -> None:
    admitted = users_admitted(row)
    if admitted is not None and not accepted:
        raise Refused(f"users are admitted to {row.name} ({admitted}): a drill breaks their requests. Close admission "
                      f"first (`/kimi admission close {row.name} --reason …`), or accept the impact with "
                      "`accept-user-impact` (CLI: `--accept-user-impact`)")


def say(uow: SqlUnitOfWork, spec: EndpointSettings, drill: Drill, at: dt.datetime, actor: str, action: str,
         text: str, **details: Any) -> None:
    """One audit row and one channel line for a drill's state change (the caller's transaction)."""
    uow.audit.record(at=at, actor=actor, action=action, subject=f"endpoint:{spec.name}",
                     details={"drill_id": drill.id, "kind": drill.kind, **details})
    uow.events.emit(DrillNotice(endpoint_name=spec.name, channel=spec.channel, text=text, drill_id=drill.id,
                                state=drill.state), at=at)


def abandoned(ctx: Context, drill: Drill, now: dt.datetime) -> bool:
    """A running drill that outlived its time limit by ten minutes: whatever ran it is gone."""
    since = drill.started_at or drill.decided_at
    limit = dt.timedelta(minutes=ctx.settings.drill_timeout_minutes + 10)
    return drill.state == rules.RUNNING and since is not None and now - since > limit
