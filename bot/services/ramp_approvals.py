"""Ramp steps that wait for a person: which were asked, which approved, and the approval itself (audited).

A ramp configured with ``ramp.approval_steps`` holds before those steps: the engine asks once in the thread
(audit ``ramp.approval_asked``) and an approver lets it go on (``ramp.step_approved``).
"""

from __future__ import annotations

import datetime as dt

from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.events import RolloutProgress
from bot.domain.read_models import DeploymentView
from bot.domain.states import State
from bot.services.access import Identity, authorize
from bot.services.context import Context
from bot.services.errors import NotFound, Refused
from bot.services.transitions import deployment_view

RAMP_ASKED, RAMP_APPROVED = "ramp.approval_asked", "ramp.step_approved"


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
        dep = uow.deployments.get_for_update(deployment_id)
        if dep is None:
            raise NotFound(f"no deployment #{deployment_id}")
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
        view = deployment_view(uow, dep)
        uow.commit()
        return view

