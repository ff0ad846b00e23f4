"""The state machine's persistence: create a deployment, move it, end it, keep its gate reports, read it back.

Every state change goes through :func:`transition`, which in the caller's transaction moves the
persisted state machine and writes one audit row and one outbox event. :func:`end` is the one way a
deployment stops early, so users never stay on what was not approved. The use cases
(:mod:`bot.services.deployments`) and the engine (:mod:`bot.services.engine`) both build on this
module, which imports neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.adapters.store.models import Deployment, Endpoint, GateResult
from bot.adapters.store.repositories import Conflict
from bot.adapters.store.uow import SqlUnitOfWork
from bot.domain.checks import GateReport
from bot.domain.events import DeploymentRequested, GateWaiting, RestoreStarted, StateChanged
from bot.domain.read_models import DeploymentView, GateSummary, PendingGate
from bot.domain.states import (
    BEFORE_APPLY_CLOSED,
    USERS_CLOSED_OUT,
    State,
    check_transition,
    is_past_apply,
    superseded_reason,
    work_kind,
)
from bot.services.access import Identity
from bot.services.admission import open_stuck_incident
from bot.services.context import Context
from bot.services.errors import Refused

KIMI_OPS = Identity("kimi-ops")

def path_kind(dep: Deployment) -> str:
    """Which path the deployment follows: ``deploy``, ``rollback``, or ``restore`` (a rollback kimi-ops started itself)."""
    return work_kind(dep.kind, dep.cause_id)


# ---------------------------------------------------------------------------- read models

def deployment_view(uow: SqlUnitOfWork, dep: Deployment, gate_rows: Sequence[GateResult] | None = None,
                    actors: frozenset[str] | None = None) -> DeploymentView:
    """The read model of ``dep``; ``gate_rows`` are its gate results and ``actors`` who acted on it (its audit rows'
    actors), when the caller read them already (lists)."""
    gates: dict[str, GateSummary] = {}
    pending: PendingGate | None = None
    state = State(dep.state)
    waiting_gate = state.gate
    rows = uow.gates.for_deployment(dep.id) if gate_rows is None else gate_rows
    acted = (uow.audit.actors([dep.id])[dep.id] if actors is None else actors) | {dep.requested_by} | {
        row.decided_by for row in rows if row.decided_by}
    for row in rows:
        gates[row.gate] = GateSummary(
            gate=row.gate,
            # The status column; a row written before it existed and missed by the migration decodes its report.
            status=row.status or GateReport.model_validate(row.report).status,
            decision=row.decision,
            decided_by=row.decided_by,
            decided_at=row.decided_at,
            reason=row.decision_reason,
        )
        if row.gate == waiting_gate and row.decision is None and not state.terminal:
            pending = PendingGate(
                deployment_id=dep.id,
                gate=row.gate,
                report=row.report,
                report_hash=row.report_hash,
                release_name=dep.release.name,
                release_hash=dep.release.tuple_hash,
                endpoint=dep.endpoint.name,
                requested_by=dep.requested_by,
                checked_at=row.checked_at,
                actors=acted,
            )
    return DeploymentView(
        id=dep.id,
        endpoint=dep.endpoint.name,
        release=dep.release.name,
        release_hash=dep.release.tuple_hash,
        kind=path_kind(dep),
        state=state,
        state_reason=dep.state_reason,
        requested_by=dep.requested_by,
        replaces_release=dep.replaces_release.name if dep.replaces_release else None,
        created_at=dep.created_at,
        updated_at=dep.updated_at,
        finished_at=dep.finished_at,
        manifest_hash=dep.manifest_hash,
        gates=list(gates.values()),
        pending=pending,
        rollback_offered=bool(dep.rollback_offered),
        actors=acted,
    )


def live_deployment(uow: SqlUnitOfWork, endpoint_id: int) -> Deployment | None:
    return uow.deployments.live(endpoint_id)


# ---------------------------------------------------------------------------- creation

def _busy_message(uow: SqlUnitOfWork, endpoint: Endpoint) -> str:
    holder = uow.deployments.in_flight(endpoint.id)
    if holder is None:
        return f"{endpoint.name} is busy with another deployment; try again"
    return (
        f"{endpoint.name} already has deployment #{holder.id} "
        f"({holder.kind} of {holder.release.name}, {State(holder.state).words}) "
        f"in flight, requested by {holder.requested_by} since {holder.created_at:%Y-%m-%d %H:%M} UTC; "
        f"wait for it or `/kimi cancel {holder.id}`"
    )


def create_deployment(
    ctx: Context, uow: SqlUnitOfWork, endpoint: Endpoint, release_id: int, kind: str, actor: Identity,
    replaces: int | None, rollback_of: int | None = None, cause_id: int | None = None,
) -> Deployment:
    now = ctx.clock.now()
    if uow.deployments.in_flight(endpoint.id) is not None:
        raise Refused(_busy_message(uow, endpoint))
    dep = Deployment(
        endpoint_id=endpoint.id, release_id=release_id, kind=kind, state=State.REQUESTED.value, in_flight=True,
        requested_by=actor.user_id, replaces_release_id=replaces, rollback_of_id=rollback_of, created_at=now, updated_at=now,
        cause_id=cause_id,
    )
    try:
        uow.deployments.add(dep)
    except Conflict:
        # Another replica took the endpoint between our check and our insert: the database decided.
        uow.rollback()
        endpoint = uow.endpoints.get(endpoint.name)  # type: ignore[assignment]
        raise Refused(_busy_message(uow, endpoint)) from None
    payload = {"release": dep.release.name if dep.release else None, "kind": kind, "endpoint": endpoint.name,
               "replaces": replaces}
    uow.audit.record(at=now, actor=actor.user_id, action=f"{kind}.requested", subject=f"deployment:{dep.id}", details=payload)
    uow.events.emit(DeploymentRequested(deployment_id=dep.id, endpoint_name=endpoint.name,
                                        release=dep.release.name if dep.release else None, kind=kind, replaces=replaces), at=now)
    return dep

# ---------------------------------------------------------------------------- transitions

def transition(
    uow: SqlUnitOfWork,
    ctx: Context,
    dep: Deployment,
    target: str,
    *,
    actor: str = "kimi-ops",
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Move ``dep`` to ``target`` inside the caller's transaction: state, audit row, outbox event."""
    check_transition(path_kind(dep), dep.state, target)
    now = ctx.clock.now()
    before, to = dep.state, State(target)
    dep.state = to.value
    dep.state_reason = reason
    dep.updated_at = now
    if to.terminal:
        dep.in_flight = None
        dep.finished_at = now
    if to == State.LIVE:
        for other in uow.deployments.in_states(dep.endpoint_id, [State.LIVE]):
            if other.id != dep.id:
                check_transition(other.kind, State.LIVE, State.SUPERSEDED)
                other.state, other.updated_at = State.SUPERSEDED.value, now
                other.state_reason = superseded_reason(dep.id, path_kind(dep), other.release_id == dep.release_id)
                uow.audit.record(at=now, actor=actor, action="deployment.superseded", subject=f"deployment:{other.id}",
                                 details={"by": dep.id})
    payload = {"from": before, "to": to.value, "reason": reason, "release": dep.release.name, "kind": dep.kind,
               "endpoint": dep.endpoint.name, **(details or {})}
    uow.audit.record(at=now, actor=actor, action=f"deployment.{to.value}", subject=f"deployment:{dep.id}", details=payload)
    uow.events.emit(StateChanged(deployment_id=dep.id, endpoint_name=dep.endpoint.name, from_state=before, to_state=to.value,
                                 reason=reason, release=dep.release.name, kind=path_kind(dep),
                                 details=dict(details or {})), at=now)


def end(uow: SqlUnitOfWork, ctx: Context, dep: Deployment, target: State, *, actor: str = "kimi-ops", reason: str,
        details: dict[str, Any] | None = None) -> Deployment | None:
    """End ``dep`` (rejected, failed, cancelled, expired, interrupted) so that users never stay on what was not approved.

    * a deploy or rollback that closed admission but applied nothing reopens first (``reopening``, then ``target``);
    * a deploy that may have reached the cluster ends and, in the same transaction, a restore of the live
      release's exact stored manifest starts (returned) — on a pair side it goes to ``reopening`` instead, which
      sends all the service's weight back to the other side, still running the release users had;
    * a rollback or restore that ends while users are closed out pages: admission stays closed until a person acts;
    * so does any deployment whose reopening fails (the route may hold users out and nothing will retry).
    """
    state, kind = State(dep.state), path_kind(dep)
    if kind in ("deploy", "rollback") and state in BEFORE_APPLY_CLOSED:
        dep.ending = target.value
        transition(uow, ctx, dep, State.REOPENING, actor=actor, reason=f"{reason}; reopening admission", details=details)
        return None
    pair = (dep.endpoint.settings or {}).get("pair")
    if kind == "deploy" and pair and is_past_apply(kind, state):
        # Users are on the other side (the candidate had at most its ramp's share): all weight goes back there.
        dep.ending = target.value
        transition(uow, ctx, dep, State.REOPENING, actor=actor,
                   reason=f"{reason}; returning all weight to {pair['partner']}", details=details)
        return None
    transition(uow, ctx, dep, target, actor=actor, reason=reason, details=details)
    if kind == "deploy" and is_past_apply(kind, state):
        return _start_restore(uow, ctx, dep, f"deployment #{dep.id} {target.value}")
    if kind in ("rollback", "restore") and (state in USERS_CLOSED_OUT or dep.endpoint.admission != "open"):
        open_stuck_incident(uow, ctx, dep.endpoint.name, f"{kind} #{dep.id} {target.value} while users were closed out: {reason}")
    elif state == State.REOPENING:
        # The reopening itself failed: the route may still hold users out (a close that half-happened counts too),
        # and no deployment will try again. Nobody would know but from the thread, so page.
        open_stuck_incident(uow, ctx, dep.endpoint.name,
                            f"{kind} #{dep.id} {target.value} and could not reopen admission: {reason}")
    return None


def _start_restore(uow: SqlUnitOfWork, ctx: Context, ended: Deployment, why: str) -> Deployment | None:
    live = live_deployment(uow, ended.endpoint_id)
    now = ctx.clock.now()
    if live is None or not live.applied_manifest:
        open_stuck_incident(uow, ctx, ended.endpoint.name,
                            f"{why} after its apply and there is no earlier live release to restore; users stay closed out")
        return None
    restore = create_deployment(ctx, uow, ended.endpoint, live.release_id, "rollback", KIMI_OPS, ended.release_id,
                      rollback_of=live.id, cause_id=ended.id)
    restore.applied_manifest, restore.manifest_hash = live.applied_manifest, live.manifest_hash
    uow.events.emit(RestoreStarted(deployment_id=ended.id, endpoint_name=ended.endpoint.name, restore_id=restore.id,
                                   release=live.release.name,
                                   text=f"Restore of {live.release.name} started as deployment #{restore.id}: users stay closed "
                                        "out until its exact stored manifest is applied and its readiness suite passes; "
                                        "its own thread follows it."), at=now)
    return restore


def store_gate_report(
    uow: SqlUnitOfWork, ctx: Context, dep: Deployment, report: GateReport, actor: str = "kimi-ops", *, announce: bool = True,
) -> GateResult:
    """Keep a gate's check report (a recheck adds a row; reports are never overwritten) and, unless told not to,
    announce it as waiting for a decision (a rollback's recorded evaluation waits for nobody)."""
    now = ctx.clock.now()
    row = uow.gates.add(
        GateResult(
            deployment_id=dep.id,
            gate=report.gate,
            report=report.model_dump(mode="json"),
            status=report.status,
            report_hash=report.digest(),
            checked_at=now,
        )
    )
    uow.audit.record(at=now, actor=actor, action="gate.checked", subject=f"deployment:{dep.id}",
                     details={"gate": report.gate, "status": report.status, "report_hash": row.report_hash})
    if not announce:
        return row
    uow.events.emit(GateWaiting(deployment_id=dep.id, endpoint_name=dep.endpoint.name, gate=report.gate, gate_result_id=row.id,
                                report=row.report, report_hash=row.report_hash, release=dep.release.name,
                                release_hash=dep.release.tuple_hash, requested_by=dep.requested_by, kind=dep.kind), at=now)
    return row
