"""Asking for a drill and deciding it: a deployer asks, someone else approves or rejects with a reason."""

from __future__ import annotations

from bot.adapters.store.models import Drill
from bot.domain import drills as rules
from bot.domain.chat_text import literal
from bot.domain.drills import DrillView
from bot.services.access import Identity, authorize
from bot.services.context import Context
from bot.services.drills.records import (
    ACTOR,
    abandoned,
    check_kind,
    endpoint_row,
    refuse_user_impact,
    say,
    spec_of,
    view_of,
)
from bot.services.errors import NotFound, Refused
from bot.services.transitions import live_deployment


def request_drill(ctx: Context, actor: Identity, endpoint: str, kind: str, *, accept_user_impact: bool = False) -> DrillView:
    """Record a drill waiting for its approver; refused where it cannot or should not run."""
    kind = check_kind(kind)
    authorize(ctx, actor, "drill", f"endpoint:{endpoint}")
    now = ctx.clock.now()
    with ctx.uow() as uow:
        row = endpoint_row(uow, endpoint, lock=True)
        live = live_deployment(uow, row.id)
        if live is None:
            raise Refused(f"{row.name} has no live release: a drill tests an endpoint that serves")
        if kind in (rules.MODEL_LOAD_FAILURE, rules.ARTIFACT_OUTAGE, rules.BAD_RELEASE) and not live.applied_manifest:
            raise Refused(f"the live deployment #{live.id} of {row.name} has no stored manifest to put back after a "
                          f"{kind} drill; deploy or roll back through kimi-ops first")
        busy = uow.deployments.in_flight(row.id)
        if busy is not None:
            raise Refused(f"deployment #{busy.id} holds {row.name}; drill once it has ended")
        active = uow.drills.active_for(row.id)
        if active is not None and abandoned(ctx, active, now):
            # The process running it stopped (a restart, a lost worker): nothing will finish it. Said, not hidden.
            active.state, active.active, active.passed, active.ended_at = rules.FAILED, None, False, now
            active.reason = ("abandoned: the process running it stopped before it ended; check the endpoint "
                             "(a cordoned node or a drill manifest may still be in place)")
            say(uow, spec_of(ctx, row), active, now, ACTOR, "drill.ended", f":x: drill #{active.id} ({active.kind} on "
                 f"`{row.name}`) failed: {active.reason}.", passed=False, abandoned=True)
            uow.flush()
        elif active is not None:
            raise Refused(f"drill #{active.id} ({active.kind}) is already {active.state} on {row.name}")
        refuse_user_impact(row, accept_user_impact)
        drill = uow.drills.add(Drill(endpoint_id=row.id, kind=kind, state=rules.WAITING, active=True,
                                     requested_by=actor.user_id, requested_at=now, accept_user_impact=accept_user_impact,
                                     alerts=[], details={}))
        spec = spec_of(ctx, row)
        impact = " with users' impact accepted" if accept_user_impact else ""
        say(uow, spec, drill, now, actor.user_id, "drill.requested",
             f":test_tube: {actor.user_id} asks for a {kind} drill on `{spec.name}`{impact} (drill #{drill.id}): "
             f"{rules.KINDS[kind]}. An approver other than them answers `/kimi drill approve {drill.id}` or "
             f"`/kimi drill reject {drill.id} REASON`.", accept_user_impact=accept_user_impact)
        view = view_of(drill)
        uow.commit()
        return view


def decide_drill(ctx: Context, actor: Identity, drill_id: int, approve: bool, reason: str = "") -> DrillView:
    """Approve (the drill is then ``running``: call :func:`run_drill`) or reject a waiting drill."""
    reason = " ".join(reason.split())
    if not approve and not reason:
        raise Refused("a rejection needs a reason, e.g. `/kimi drill reject 3 not during the launch week`")
    authorize(ctx, actor, "approve_drill", f"drill:{drill_id}")
    now = ctx.clock.now()
    with ctx.uow() as uow:
        drill = uow.drills.get_for_update(drill_id)
        if drill is None:
            raise NotFound(f"no drill #{drill_id}; `/kimi drills ENDPOINT` lists them")
        if drill.state != rules.WAITING:
            raise Refused(f"drill #{drill.id} is not waiting for a decision (it is {drill.state})")
        if actor.user_id == drill.requested_by:
            uow.audit.record(at=now, actor=actor.user_id, action="access.refused", subject=f"drill:{drill.id}",
                             details={"wanted": "approve_drill", "why": "self_approval"})
            uow.commit()
            raise Refused(f"you asked for drill #{drill.id}; someone else must approve or reject it")
        spec = spec_of(ctx, drill.endpoint)
        drill.decided_by, drill.decided_at = actor.user_id, now
        if approve:
            if uow.deployments.in_flight(drill.endpoint_id) is not None:
                raise Refused(f"a deployment holds {spec.name} now; approve drill #{drill.id} once it has ended")
            refuse_user_impact(drill.endpoint, drill.accept_user_impact)
            drill.state = rules.RUNNING
            say(uow, spec, drill, now, actor.user_id, "drill.approved",
                 f":test_tube: {actor.user_id} approved drill #{drill.id} ({drill.kind} on `{spec.name}`); it starts now.")
        else:
            drill.state, drill.active, drill.ended_at, drill.reason = rules.REJECTED, None, now, reason[:500]
            say(uow, spec, drill, now, actor.user_id, "drill.rejected",
                 f":test_tube: {actor.user_id} rejected drill #{drill.id} ({drill.kind} on `{spec.name}`): "
                 f"{literal(reason[:500])}",
                 reason=reason[:500])
        view = view_of(drill)
        uow.commit()
        return view
