"""Deployment use cases: request, decide, cancel, roll back, and read history.

The state machine's persistence (create, transition, end, gate reports, the view) is
:mod:`bot.services.transitions`; the slow steps (checks, apply, rollout, readiness) are run by
:mod:`bot.services.engine`, which entrypoints call after acknowledging the user.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from bot.adapters.store.models import Deployment, Endpoint
from bot.adapters.store.repositories import Conflict
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.chat_text import literal, typed
from bot.domain.checks import GATES, GateReport
from bot.domain.events import GateDecided
from bot.domain.limits import approval_above_limits, limits_above, proposed_limits
from bot.domain.names import did_you_mean, match
from bot.domain.read_models import DeploymentView, PendingGate
from bot.domain.states import State, work_kind
from bot.services.access import Identity, authorize
from bot.services.context import Context
from bot.services.errors import Invalid, NoEndpoints, NotFound, Refused
from bot.services.pair_sides import service_settings, users_side
from bot.services.pairs import deploy_side
from bot.services.releases import release_row
from bot.services.transitions import create_deployment, deployment_view, end, live_deployment, path_kind, transition

# ---------------------------------------------------------------------------- read models


def _views(uow: SqlUnitOfWork, deps: Sequence[Deployment]) -> list[DeploymentView]:
    """Read models of a list of deployments: their gate results and actors in one query each, not one per deployment."""
    gates = uow.gates.for_deployments([d.id for d in deps])
    actors = uow.audit.actors([d.id for d in deps])
    return [deployment_view(uow, d, gates[d.id], actors[d.id]) for d in deps]


def get_deployment(ctx: Context, deployment_id: int) -> DeploymentView:
    with ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        if dep is None:
            raise NotFound(f"no deployment #{deployment_id}; `/kimi history` lists them")
        return deployment_view(uow, dep)




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
        dep = create_deployment(ctx, uow, endpoint, release.id, "deploy", actor, live.release_id if live else None)
        view = deployment_view(uow, dep)
        uow.commit()
        return view


def request_rollback(ctx: Context, endpoint_name: str | None, actor: Identity, to_release: str | None = None) -> DeploymentView:
    """Restore the complete previous release tuple (or ``to_release``) with its exact applied manifest.

    A service (a pair) is rolled back by :func:`bot.services.pairs.rollback_service`, to the release its warm side
    runs: a named release is refused here with the deploy that would serve it."""
    service = service_settings(ctx, endpoint_name)
    if service is not None and to_release is not None:
        wanted = literal(to_release)
        raise Refused(f"{service.name} is a service: `/kimi rollback {service.name}` moves its users back to the side "
                      f"kept warm, with the release that side runs; to serve {wanted}: "
                      f"`/kimi deploy {wanted} to {service.name}`")
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
        # Candidates: releases that were live before, newest first, with the manifest that made them live.
        previous = [d for d in history if State(d.state).was_live and d.applied_manifest and d.id != current.id]
        # What can actually be restored from here: every other release that was live, newest first.
        others = list(dict.fromkeys(d.release.name for d in previous if d.release_id != current.release_id))
        offer = (f"`/kimi rollback {name} to {others[0]}`" + (f" (also live before: {', '.join(others[1:])})"
                                                                if others[1:] else "")) if others else None
        if to_release is None and current.kind == "rollback":
            what = work_kind(current.kind, current.cause_id)
            if offer is None:
                raise Refused(f"{current.release.name} on {name} was put back by {what} #{current.id}, and no other "
                              "release was live here before it: there is nothing else to roll back to")
            raise Refused(f"{current.release.name} on {name} was put back by {what} #{current.id}; to go back further, "
                          f"name the release: {offer}")
        if to_release is not None:
            target = next((d for d in previous if d.release.name == to_release), None)
            if target is None:
                raise Refused(f"{to_release} was never live on {name}; a rollback restores a release that was"
                              + (f": {offer}" if offer else ", and no other release was live here"))
        else:
            target = next((d for d in previous if restore_same_release or d.release_id != current.release_id), None)
            if target is None:
                raise Refused(f"no earlier live release on {name} to roll back to")
        if target.release_id == current.release_id and current.state == State.LIVE:
            raise Refused(f"{target.release.name} is already live on {name}")
        dep = create_deployment(ctx, uow, endpoint, target.release_id, "rollback", actor, current.release_id,
                                rollback_of=target.id)
        dep.applied_manifest = target.applied_manifest
        dep.manifest_hash = target.manifest_hash
        view = deployment_view(uow, dep)
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
                reason=f"{gate} gate rejected by {actor.user_id}: {typed(reason) if reason else 'no reason given'}")
        view = deployment_view(uow, dep)
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
        view = deployment_view(uow, dep)
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
        view = deployment_view(uow, dep)
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


