"""Deployment use cases: request, decide, recheck, cancel, roll back, and read history.

Every state change goes through :func:`transition`, which in one transaction
moves the persisted state machine, writes one audit row and one outbox event.
The slow steps (checks, apply, rollout, readiness) are run by
:mod:`bot.services.engine`, which entrypoints call after acknowledging the user.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from bot.adapters.store.models import Deployment, Endpoint, GateResult
from bot.adapters.store.repositories import Conflict
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.checks import GATES, GateReport
from bot.domain.events import (
    DeploymentRequested,
    GateDecided,
    GateWaiting,
    RestoreStarted,
    RolloutProgress,
    StateChanged,
)
from bot.domain.limits import approval_above_limits, limits_above, proposed_limits
from bot.domain.names import did_you_mean, match
from bot.domain.read_models import DeploymentView, GateSummary, PendingGate
from bot.domain.states import BEFORE_APPLY_CLOSED, STATE_OF_GATE, USERS_CLOSED_OUT, State, check_transition, is_past_apply
from bot.services.access import Identity, authorize
from bot.services.admission import open_stuck_incident
from bot.services.context import Context
from bot.services.errors import Invalid, NoEndpoints, NotFound, Refused
from bot.services.pairs import deploy_side, service_settings, users_side
from bot.services.releases import release_row

KIMI_OPS = Identity("kimi-ops")
RAMP_ASKED, RAMP_APPROVED = "ramp.approval_asked", "ramp.step_approved"


def path_kind(dep: Deployment) -> str:
    """Which path the deployment follows: ``deploy``, ``rollback``, or ``restore`` (a rollback kimi-ops started itself)."""
    return "restore" if dep.kind == "rollback" and dep.cause_id is not None else dep.kind


# ---------------------------------------------------------------------------- read models

def _view(uow: SqlUnitOfWork, dep: Deployment, gate_rows: Sequence[GateResult] | None = None) -> DeploymentView:
    """The read model of ``dep``; ``gate_rows`` are its gate results when the caller read them already (lists)."""
    gates: dict[str, GateSummary] = {}
    pending: PendingGate | None = None
    state = State(dep.state)
    waiting_gate = state.gate
    for row in uow.gates.for_deployment(dep.id) if gate_rows is None else gate_rows:
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
    )


def _views(uow: SqlUnitOfWork, deps: Sequence[Deployment]) -> list[DeploymentView]:
    """Read models of a list of deployments: their gate results in one query, not one per deployment."""
    gates = uow.gates.for_deployments([d.id for d in deps])
    return [_view(uow, d, gates[d.id]) for d in deps]


def get_deployment(ctx: Context, deployment_id: int) -> DeploymentView:
    with ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        if dep is None:
            raise NotFound(f"no deployment #{deployment_id}; `/kimi history` lists them")
        return _view(uow, dep)


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
                other.state_reason = f"superseded by deployment #{dep.id}"
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
    restore = _create(ctx, uow, ended.endpoint, live.release_id, "rollback", KIMI_OPS, ended.release_id,
                      rollback_of=live.id, cause_id=ended.id)
    restore.applied_manifest, restore.manifest_hash = live.applied_manifest, live.manifest_hash
    uow.events.emit(RestoreStarted(deployment_id=ended.id, endpoint_name=ended.endpoint.name, restore_id=restore.id,
                                   release=live.release.name,
                                   text=f"Restoring {live.release.name} (deployment #{restore.id}): users stay closed out while "
                                        f"its exact stored manifest is applied and its readiness suite passes."), at=now)
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


# ---------------------------------------------------------------------------- requests


def endpoint_settings(ctx: Context, name: str) -> EndpointSettings:
    """Settings of an endpoint as stored (the YAML file plus limits accepted since); its name in any case."""
    with ctx.uow() as uow:
        return EndpointSettings.model_validate(endpoint_row(uow, name).settings)


def endpoint_row(uow: SqlUnitOfWork, name: str) -> Endpoint:
    """The endpoint's row (its name typed in any case), or :class:`NotFound` with the closest names and all there are."""
    row = uow.endpoints.get(name)
    if row is None:
        names = [e.name for e in uow.endpoints.list()]
        same = match(name, names)
        if same is not None:
            found = uow.endpoints.get(same)
            assert found is not None
            return found
        known = ", ".join(names) or "none are configured (KIMI_CONFIG)"
        hint = did_you_mean(name, names)
        listed = f"{hint} Known endpoints: {known}" if hint else f"; known endpoints: {known}"
        raise NotFound(f"no endpoint named {name}{listed}")
    return row


def resolve_endpoint(ctx: Context, name: str | None) -> str:
    """The endpoint's name as declared (typed in any case), or the only one when none is named."""
    if name:
        with ctx.uow() as uow:
            row = endpoint_row(uow, name)
            EndpointSettings.model_validate(row.settings)  # settings no code can read fail here, before any work
            return row.name
    with ctx.uow() as uow:
        names = [e.name for e in uow.endpoints.list()]
    if len(names) == 1:
        return names[0]
    if not names:
        raise NoEndpoints("no endpoints are configured; declare them in the KIMI_CONFIG file")
    raise Refused(f"name the endpoint: one of {', '.join(names)}")


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


def live_deployment(uow: SqlUnitOfWork, endpoint_id: int) -> Deployment | None:
    return uow.deployments.live(endpoint_id)


def _create(
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


def request_deploy(ctx: Context, release_name: str, endpoint_name: str | None, actor: Identity) -> DeploymentView:
    """Open a deployment of ``release_name`` on the endpoint; the engine then runs its gates.

    A service's name (a pair of endpoints) deploys to the side users are not on.
    """
    service = service_settings(ctx, endpoint_name)
    if service is not None:
        authorize(ctx, actor, "deploy", f"service:{service.name}")
    name = deploy_side(ctx, service) if service is not None else resolve_endpoint(ctx, endpoint_name)
    pair = endpoint_settings(ctx, name).pair if service is None else None
    if pair is not None:
        # Only the service knows which side users are on: a deploy named at a side could close them out.
        raise Refused(f"{name} is a side of service {pair.service}: `deploy {release_name} to {pair.service}` "
                      "goes to the side users are not on")
    authorize(ctx, actor, "deploy", f"endpoint:{name}")
    with ctx.uow() as uow:
        endpoint = endpoint_row(uow, name)
        release = release_row(uow, release_name)
        live = live_deployment(uow, endpoint.id)
        if service is not None:
            # The idle side may still hold this release warm; only the side users are on makes it "already live".
            users = users_side(uow, service)
            on = live_deployment(uow, users.id) if users is not None else None
            if users is not None and on is not None and on.release_id == release.id:
                raise Refused(f"{release_name} is already what {service.name}'s users get (on {users.name})")
        elif live is not None and live.release_id == release.id:
            raise Refused(f"{release_name} is already live on {name} (deployment #{live.id})")
        dep = _create(ctx, uow, endpoint, release.id, "deploy", actor, live.release_id if live else None)
        view = _view(uow, dep)
        uow.commit()
        return view


def request_rollback(ctx: Context, endpoint_name: str | None, actor: Identity, to_release: str | None = None) -> DeploymentView:
    """Restore the complete previous release tuple (or ``to_release``) with its exact applied manifest."""
    name = resolve_endpoint(ctx, endpoint_name)
    authorize(ctx, actor, "rollback", f"endpoint:{name}")
    pair = (endpoint_settings(ctx, name)).pair
    if pair is not None:
        raise Refused(f"{name} is a side of service {pair.service}: `rollback {pair.service}` moves its users back to "
                      "the side kept warm in one route change")
    with ctx.uow() as uow:
        endpoint = endpoint_row(uow, name)
        history = uow.deployments.for_endpoint(endpoint.id)
        live = live_deployment(uow, endpoint.id)
        latest = history[0] if history else None
        # A deployment that ended badly after its manifest was stored may be what the cluster now runs.
        if latest is not None and State(latest.state).ended_early and latest.manifest_hash \
                and (live is None or latest.id > live.id):
            current, restore_same_release = latest, True
        elif live is not None:
            current, restore_same_release = live, False
        else:
            raise Refused(f"nothing to roll back on {name}: no live release and no failed deployment past apply")
        if to_release is None and current.kind == "rollback":
            raise Refused(
                f"the current release on {name} is itself a rollback (deployment #{current.id}); "
                f"name the release to restore: `/kimi rollback {name} to RELEASE`"
            )
        # Candidates: releases that were live before, newest first, with the manifest that made them live.
        previous = [d for d in history if State(d.state).was_live and d.applied_manifest and d.id != current.id]
        if to_release is not None:
            target = next((d for d in previous if d.release.name == to_release), None)
            if target is None:
                raise Refused(f"{to_release} was never live on {name}; a rollback restores a release that was")
        else:
            target = next((d for d in previous if restore_same_release or d.release_id != current.release_id), None)
            if target is None:
                raise Refused(f"no earlier live release on {name} to roll back to")
        if target.release_id == current.release_id and current.state == State.LIVE:
            raise Refused(f"{target.release.name} is already live on {name}")
        dep = _create(ctx, uow, endpoint, target.release_id, "rollback", actor, current.release_id, rollback_of=target.id)
        dep.applied_manifest = target.applied_manifest
        dep.manifest_hash = target.manifest_hash
        view = _view(uow, dep)
        uow.commit()
        return view


# ---------------------------------------------------------------------------- decisions


def _for_update(uow: SqlUnitOfWork, deployment_id: int) -> Deployment:
    """The deployment, locked for this transaction; a number that names none is NotFound."""
    dep = uow.deployments.get_for_update(deployment_id)
    if dep is None:
        raise NotFound(f"no deployment #{deployment_id}")
    return dep


def decide_gate(
    ctx: Context,
    deployment_id: int,
    gate: str,
    decision: str,
    actor: Identity,
    *,
    seen_report_hash: str,
    seen_release_hash: str,
    reason: str | None = None,
    override_reason: str | None = None,
) -> DeploymentView:
    """Approve or reject the waiting gate, bound to the exact report and release the decider saw.

    A traffic gate whose endpoint would go live admitting more than the report measured safe is approved
    only with ``override_reason`` (recorded in the gate's ``seen`` and the audit row); otherwise refused.
    """
    if decision not in ("approved", "rejected"):
        raise Refused("a decision is approved or rejected")
    if gate not in GATES:
        raise Invalid(f"there is no {gate!r} gate; the gates are {', '.join(GATES)}")
    # One rule for Slack's reason form and the CLI's --reason: a rejection says why, in words.
    if decision == "rejected" and not (reason or "").strip():
        raise Invalid("say why the gate is rejected: the reason is recorded and shown in the thread and the history")
    reason = reason.strip() if reason else reason
    authorize(ctx, actor, "decide", f"deployment:{deployment_id}")
    now = ctx.clock.now()

    def refuse(uow: SqlUnitOfWork, message: str, why: str) -> Refused:
        uow.rollback()
        uow.audit.record(at=now, actor=actor.user_id, action="gate.decision_refused", subject=f"deployment:{deployment_id}",
                         details={"gate": gate, "decision": decision, "why": why})
        uow.commit()
        return Refused(message)

    with ctx.uow() as uow:
        dep = _for_update(uow, deployment_id)
        state = State(dep.state)
        if state.gate != gate:
            where = "finished" if state.terminal else f"at {state.words}"
            raise refuse(uow, f"the {gate} gate of deployment #{dep.id} is not waiting for a decision "
                              f"(the deployment is {where})", "not_waiting")
        row = uow.gates.latest(dep.id, gate)
        if row is None:
            raise refuse(uow, f"the {gate} gate of deployment #{dep.id} has no report yet; wait for its checks", "no_report")
        if row.decision is not None:
            raise refuse(uow, f"the {gate} gate was already {row.decision} by {row.decided_by} "
                              f"at {row.decided_at:%H:%M} UTC", "already_decided")
        if seen_report_hash != row.report_hash or seen_release_hash != dep.release.tuple_hash:
            raise refuse(uow, f"the {gate} report changed since you looked (it was re-checked); "
                              "review the new report and decide again", "stale")
        endpoint = EndpointSettings.model_validate(dep.endpoint.settings)
        above: str | None = None
        if decision == "approved":
            if endpoint.requires_separate_approver and actor.user_id == dep.requested_by:
                raise refuse(uow, f"you requested deployment #{dep.id}; someone else must approve its gates "
                                  f"on {endpoint.name}", "self_approval")
            report = GateReport.model_validate(row.report)
            if not report.approvable:
                names = ", ".join(c.name for c in report.blocking)
                raise refuse(uow, f"the {gate} gate has failed or errored checks ({names}); "
                                  "reject it, or re-run its checks once the cause is fixed", "blocking_checks")
            above = limits_above(proposed_limits(report), endpoint.effective_request_limits.model_dump(mode="json")) \
                if gate == "traffic" else None
            if above is not None and not (override_reason or "").strip():
                raise refuse(uow, f"{endpoint.name} would go live with {above}; accept the proposed limits first, or "
                                  "approve above the measured limits with a reason", "limits_above_proposal")
        row.decision, row.decided_by, row.decided_at, row.decision_reason = decision, actor.user_id, now, reason
        row.seen = {"report_hash": seen_report_hash, "release_hash": seen_release_hash, "release": dep.release.name,
                    "status": GateReport.model_validate(row.report).status}
        if decision == "approved" and above is not None:
            row.seen["limits_override"] = {"reason": (override_reason or "").strip(), "above": above}
        try:
            uow.flush()
        except Conflict:
            raise refuse(uow, f"the {gate} gate was decided by someone else a moment ago", "race") from None
        details = {"gate": gate, "decision": decision, "reason": reason, "gate_result_id": row.id, **row.seen}
        uow.audit.record(at=now, actor=actor.user_id, action=f"gate.{decision}", subject=f"deployment:{dep.id}", details=details)
        uow.events.emit(GateDecided(deployment_id=dep.id, endpoint_name=dep.endpoint.name, gate=gate, decision=decision,
                                    reason=reason, gate_result_id=row.id, report_hash=seen_report_hash,
                                    release_hash=seen_release_hash, release=dep.release.name, status=row.seen["status"],
                                    decided_by=actor.user_id, decided_at=now, slack_channel=row.slack_channel,
                                    slack_ts=row.slack_ts), at=now)
        if decision == "rejected":
            end(uow, ctx, dep, State.REJECTED, actor=actor.user_id,
                reason=f"{gate} gate rejected by {actor.user_id}: {reason or 'no reason given'}")
        view = _view(uow, dep)
        uow.commit()
        return view


def cancel(ctx: Context, deployment_id: int, actor: Identity, *, force: bool = False) -> DeploymentView:
    """Cancel an in-flight deployment; ``force`` (admins) breaks a stuck one and marks it interrupted.

    A deploy cancelled after its apply is restored to the previous release; a restore cannot be cancelled
    (it is what gives users a release that passed its gates back), only broken by an admin.
    """
    authorize(ctx, actor, "break_lock" if force else "cancel", f"deployment:{deployment_id}")
    with ctx.uow() as uow:
        dep = _for_update(uow, deployment_id)
        state = State(dep.state)
        if state.terminal:
            raise Refused(f"deployment #{dep.id} already ended ({state.words})")
        if force:
            end(uow, ctx, dep, State.INTERRUPTED, actor=actor.user_id,
                reason=f"lock broken by admin {actor.user_id} {state.during}", details={"forced": True})
        elif path_kind(dep) == "restore":
            raise Refused(f"deployment #{dep.id} restores the release that passed its gates and cannot be cancelled; "
                          f"an admin can break it with `/kimi cancel {dep.id} force` (users then stay closed out)")
        else:
            end(uow, ctx, dep, State.CANCELLED, actor=actor.user_id, reason=f"cancelled by {actor.user_id} {state.during}")
        view = _view(uow, dep)
        uow.commit()
        return view


def ramp_steps_approved(uow: SqlUnitOfWork, deployment_id: int) -> set[str]:
    return {str(d.get("step")) for _, _, _, d in uow.audit.actions(f"deployment:{deployment_id}", RAMP_APPROVED)}


def ramp_step_waiting(uow: SqlUnitOfWork, deployment_id: int) -> tuple[str, dt.datetime] | None:
    """The ramp step a person was asked to approve and has not, with when it was asked (the ramp holds before it)."""
    approved = ramp_steps_approved(uow, deployment_id)
    for _, _, at, details in uow.audit.actions(f"deployment:{deployment_id}", RAMP_ASKED):  # newest first
        if str(details.get("step")) not in approved:
            return str(details.get("step")), at
    return None


def approve_ramp_step(ctx: Context, deployment_id: int, step: str, actor: Identity) -> DeploymentView:
    """An approver lets a ramp that holds before ``step`` (``ramp.approval_steps``) go on; audited."""
    authorize(ctx, actor, "decide", f"deployment:{deployment_id}")
    with ctx.uow() as uow:
        dep = _for_update(uow, deployment_id)
        if dep.state != State.RAMPING:
            raise Refused(f"deployment #{dep.id} is not ramping (it is {State(dep.state).words})")
        asked = {str(d.get("step")) for _, _, _, d in uow.audit.actions(f"deployment:{dep.id}", RAMP_ASKED)}
        holding = asked - ramp_steps_approved(uow, dep.id)
        if step not in holding:
            waiting = ", ".join(sorted(holding)) or "none"
            raise Refused(f"the ramp of deployment #{dep.id} does not hold before {step} (waiting: {waiting})")
        endpoint = EndpointSettings.model_validate(dep.endpoint.settings)
        if endpoint.requires_separate_approver and actor.user_id == dep.requested_by:
            raise Refused(f"you requested deployment #{dep.id}; someone else must approve its ramp on {endpoint.name}")
        now = ctx.clock.now()
        uow.audit.record(at=now, actor=actor.user_id, action=RAMP_APPROVED, subject=f"deployment:{dep.id}",
                         details={"step": step})
        uow.events.emit(RolloutProgress(deployment_id=dep.id, endpoint_name=dep.endpoint.name, state=dep.state,
                                        message=f"{actor.user_id} approved the ramp's step {step}"), at=now)
        view = _view(uow, dep)
        uow.commit()
        return view


def decide_drain(ctx: Context, deployment_id: int, choice: str, actor: Identity) -> DeploymentView:
    """A drain passed its deadline with requests still running: wait longer, or abort (reopen, nothing applied)."""
    if choice not in ("wait", "abort"):
        raise Refused("a stalled drain is answered with `wait` (longer) or `abort` (reopen and cancel)")
    authorize(ctx, actor, "drain", f"deployment:{deployment_id}")
    with ctx.uow() as uow:
        dep = _for_update(uow, deployment_id)
        if dep.state != State.DRAIN_STALLED:
            raise Refused(f"deployment #{dep.id} is not waiting on a stalled drain (it is {State(dep.state).words})")
        if choice == "wait":
            transition(uow, ctx, dep, State.DRAINING, actor=actor.user_id,
                       reason=f"{actor.user_id} chose to wait longer for the drain")
        else:
            end(uow, ctx, dep, State.CANCELLED, actor=actor.user_id,
                reason=f"drain aborted by {actor.user_id}; nothing was applied")
        view = _view(uow, dep)
        uow.commit()
        return view


# ---------------------------------------------------------------------------- queries


def pending_gates(ctx: Context, actor: Identity | None = None) -> list[PendingGate]:
    """Gates waiting for a decision (those ``actor`` may decide, when given)."""
    with ctx.uow() as uow:
        result = []
        rows = uow.gates.pending()
        deps = uow.deployments.by_ids(sorted({row.deployment_id for row in rows}), listed=True)
        views = {v.id: v for v in _views(uow, list(deps.values()))}
        for row in rows:
            dep = deps.get(row.deployment_id)
            if dep is None:
                continue
            view = views[dep.id]
            if view.pending is None or view.pending.gate != row.gate:
                continue
            endpoint = EndpointSettings.model_validate(dep.endpoint.settings)
            if actor is not None and endpoint.requires_separate_approver and actor.user_id == dep.requested_by:
                continue
            above = approval_above_limits(GateReport.model_validate(row.report),
                                          endpoint.effective_request_limits.model_dump(mode="json"))
            result.append(replace(view.pending, above_limits=above))
        return result


def history(ctx: Context, endpoint_name: str | None = None, limit: int = 20) -> list[DeploymentView]:
    name = resolve_endpoint(ctx, endpoint_name)
    with ctx.uow() as uow:
        endpoint = endpoint_row(uow, name)
        return _views(uow, uow.deployments.for_endpoint(endpoint.id, limit, listed=True))


def in_flight(ctx: Context) -> list[DeploymentView]:
    with ctx.uow() as uow:
        return _views(uow, uow.deployments.all_in_flight(listed=True))


def gate_state(gate: str) -> State:
    return STATE_OF_GATE[gate]

@dataclass(frozen=True)
class StoredGateReport:
    """The newest stored report of one gate of a deployment, with its decision if one was made."""

    deployment_id: int
    kind: str
    release: str
    gate: str
    report: dict[str, Any]
    report_hash: str
    checked_at: dt.datetime
    checks_run: int
    decision: str | None
    decided_by: str | None
    decided_at: dt.datetime | None
    decision_reason: str | None


def stored_gate_report(ctx: Context, deployment_id: int, gate: str) -> StoredGateReport:
    """The latest report of ``gate`` for ``deployment_id`` (a recheck adds one; the newest is what was decided on)."""
    if gate not in STATE_OF_GATE:
        raise NotFound(f"no gate named {gate}; the gates are {', '.join(STATE_OF_GATE)}")
    with ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        if dep is None:
            raise NotFound(f"no deployment #{deployment_id}; `/kimi history` lists them")
        rows = [r for r in uow.gates.for_deployment(dep.id) if r.gate == gate]
        if not rows:
            why = ("a rollback has only an artifact gate (and its evaluation)" if dep.kind == "rollback"
                   else f"the deployment is {State(dep.state).words}")
            raise NotFound(f"deployment #{dep.id} has no {gate} gate report ({why})")
        row = rows[-1]
        return StoredGateReport(
            deployment_id=dep.id, kind=dep.kind, release=dep.release.name, gate=gate, report=row.report,
            report_hash=row.report_hash, checked_at=row.checked_at, checks_run=len(rows), decision=row.decision,
            decided_by=row.decided_by, decided_at=row.decided_at, decision_reason=row.decision_reason,
        )
