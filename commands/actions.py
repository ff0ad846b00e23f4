"""Button clicks and the reject-reason modal: decide a gate, or accept a traffic proposal, bound to the report the clicker saw.

The decision service refuses stale reports, decided gates, self-approval on
production and people without the approver role (auditing each refusal); the
limits service refuses stale, already accepted and unchanged proposals the same
way. The refusal's sentence goes back to the clicker only.
"""

from __future__ import annotations

import json

from bot.bootstrap import Root
from bot.domain.limits import limits_words
from bot.services.access import Identity, authorize
from bot.services.context import Context
from bot.services.deployments import decide_gate
from bot.services.errors import NotFound, Refused
from bot.services.gate_reports import stored_gate_report
from bot.services.traffic_gate import accept_proposed_limits
from bot.views.actions import GateTicket
from bot.views.deployments import next_step_words
from bot.views.gates import all_checks_parts
from bot.views.parts import Reply, plain, reply
from commands.base import number_words, storable

DAMAGED = "this button comes from a damaged or outdated message; `/kimi gates` shows what waits"


def ticket(value: str | None) -> GateTicket:
    try:
        seen = GateTicket.decode(value or "")
    except (ValueError, KeyError, TypeError):
        raise Refused(DAMAGED) from None
    return GateTicket(deployment(seen.deployment_id), seen.gate, seen.report_hash, seen.release_hash)


def deployment(number: int) -> int:
    """``number``, if a deployment could have it; else the answer a deployment that does not exist gets."""
    if not storable(number):
        raise NotFound(f"no deployment {number_words(number)}; `/kimi history` lists them")
    return number


def may_decide(ctx: Context, identity: Identity, value: str | None) -> GateTicket:
    """Before the reason modal opens: refuse (and audit) someone who may not decide at all."""
    seen = ticket(value)
    authorize(ctx, identity, "decide", f"deployment:{seen.deployment_id}")
    return seen


def recheck(root: Root, identity: Identity, value: str | None) -> Reply:
    """Re-run a blocked gate's checks (after its cause was fixed); the new report arrives in the thread."""
    seen = ticket(value)
    authorize(root.ctx, identity, "recheck", f"deployment:{seen.deployment_id}")

    def run() -> None:
        root.engine.recheck(seen.deployment_id, seen.gate, identity)

    return reply(f"Re-running the {seen.gate} checks of deployment #{seen.deployment_id}; the new report follows in the thread.",
                 then=run)


def decide(root: Root, identity: Identity, value: str | None, decision: str, reason: str | None = None, *,
           override_reason: str | None = None) -> Reply:
    seen = ticket(value)
    view = decide_gate(root.ctx, seen.deployment_id, seen.gate, decision, identity, seen_report_hash=seen.report_hash,
                       seen_release_hash=seen.release_hash, reason=reason, override_reason=override_reason)

    def advance() -> None:
        root.engine.advance(view.id)

    if decision == "approved":
        return reply(f"You approved the {seen.gate} gate of deployment #{view.id}; next: "
                     f"{next_step_words(view.kind, view.state)} (the progress message in its thread follows it).",
                     then=advance)
    # A rejection after apply started a restore of the previous release (and one while closed reopens first):
    # advancing the ended deployment drives that, so the endpoint never stays on the rejected candidate.
    return reply(f"You rejected the {seen.gate} gate of deployment #{view.id}; the deployment ended.", then=advance)


def accept_and_approve(root: Root, identity: Identity, value: str | None) -> Reply:
    """One press on a traffic gate above its measured limits: accept the proposal, then approve the gate.

    Whether the presser may decide is checked before anything is accepted; a refusal of either step changes nothing
    the gate message shows (an acceptance that went through before a refused approval is a decision taken, and said).
    """
    seen = ticket(value)
    if seen.gate != "traffic":
        raise Refused("this button comes from a damaged or outdated message; `/kimi gates` shows what waits")
    authorize(root.ctx, identity, "decide", f"deployment:{seen.deployment_id}")
    done = accept_proposed_limits(root.ctx, None, seen.deployment_id, identity, seen_report_hash=seen.report_hash)
    try:
        approved = decide(root, identity, value, "approved")
    except Refused as exc:
        raise Refused(f"you accepted {limits_words(done.accepted)} for {done.endpoint}, but the gate was not approved: "
                      f"{exc}") from None
    return reply(f"You accepted {limits_words(done.accepted)} for {done.endpoint} and approved the traffic gate of "
                 f"deployment #{seen.deployment_id}.", then=approved.then)


def show_checks(ctx: Context, identity: Identity, value: str | None) -> Reply:
    """Every check of the gate's newest report, for the clicker alone (the message counts the passing ones)."""
    try:
        data = json.loads(value or "")
        deployment_id, gate = int(data["d"]), str(data["g"])
    except (ValueError, KeyError, TypeError):
        raise Refused(DAMAGED) from None
    deployment(deployment_id)
    authorize(ctx, identity, "view", f"deployment:{deployment_id}")
    stored = stored_gate_report(ctx, deployment_id, gate)
    parts = all_checks_parts(stored.report, deployment_id, stored.actors)
    return Reply(parts=parts, text=plain(parts))


def accept_limits(root: Root, identity: Identity, value: str | None) -> Reply:
    """Store the traffic report's proposed limits in its endpoint's settings; the gate message says who and when.

    When the limits reach the cluster through the procedure (a restore of the live release, or the ramp closing to
    apply them), that work is driven at once, as ``/kimi rollback`` drives its own; a takeover round only picks it up
    after a crash.
    """
    seen = ticket(value)
    if seen.gate != "traffic":
        raise Refused(DAMAGED)
    done = accept_proposed_limits(root.ctx, None, seen.deployment_id, identity, seen_report_hash=seen.report_hash)
    before = done.previous
    if done.applied_sha256:
        where = (f"applied to deployment #{done.deployment_id}'s running release (manifest revision {done.revision}, "
                 f"{done.applied_sha256[:12]})")
    elif done.restore_id is not None:
        where = f"restore #{done.restore_id} applies them to the live release: {done.how}; its thread follows it"
    elif done.ramping:
        where = f"deployment #{done.deployment_id} is ramping, so its ramp applies them: {done.how}; its thread follows it"
    else:
        where = done.how or "the next manifest rendered for it uses them"
    driven = done.drive

    def drive() -> None:
        if driven is not None:
            root.engine.advance(driven)

    return reply(f"You accepted {limits_words(done.accepted)} for {done.endpoint} (was {before['max_concurrent_requests']} / "
                 f"{before['max_queue_size']}); {where}.", then=drive if driven is not None else None)
