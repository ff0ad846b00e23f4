"""How accepted request limits reach the cluster: through the procedure, never over admitted users.

A new concurrency limit restarts the model pod (EKS: a new ``--max-num-seqs``; HyperPod: a new
``worker.requestLimits`` the operator rolls out), so it is applied the way a release is:

* **users closed out** (the deployment is past its apply and still at its gates): applied at once, as a new
  manifest revision; nobody is admitted to the candidate yet, and its ramp first watches that revision's rollout
  and runs the readiness suite again (:mod:`bot.services.engine.revised`);
* **ramping** (users admitted step by step): refused; accept once it is live;
* **live on a single node**: a restore of the same release with the new limits is started (kind ``rollback``
  caused by the live deployment): close → drain → apply → readiness → evaluation → reopen, driven by the engine
  like any restore;
* **live on a side of a pair**: applied at once to the idle side (no users there); on the side users are on they
  are kept for the next deployment onto it (``/kimi status`` says "accepted, not applied").
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.adapters.store.models import Deployment, Endpoint
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.states import USERS_CLOSED_OUT, State, is_past_apply
from bot.services.context import Context
from bot.services.releases import manifest_from_row
from bot.services.transitions import KIMI_OPS, create_deployment


@dataclass(frozen=True)
class LimitsPlan:
    """What accepting does to the cluster: ``apply`` now, ``restore`` through the procedure, or ``keep`` for later."""

    how: str
    why: str


def plan_limits(dep: Deployment, row: Endpoint, endpoint: EndpointSettings) -> LimitsPlan:
    """Where ``dep`` stands decides how its accepted limits are applied (see the module docstring)."""
    state = State(dep.state)
    running = state == State.LIVE or is_past_apply(dep.kind, dep.state)
    if not running or dep.applied_manifest is None:
        return LimitsPlan("keep", "the next manifest rendered for it uses them")
    if state == State.RAMPING:
        return LimitsPlan("refuse", f"deployment #{dep.id} is ramping: users are admitted to it, and new limits restart the "
                                    "model; accept once it is live, where a restore applies them behind a closed door")
    if state in USERS_CLOSED_OUT:
        return LimitsPlan("apply", "users are closed out of it")
    if endpoint.pair is not None:
        if row.admission == "closed":
            return LimitsPlan("apply", f"its side is idle (every user is on {endpoint.pair.partner})")
        return LimitsPlan("keep", f"users are on this side of {endpoint.pair.service}: the next deployment onto it carries "
                                  "them")
    return LimitsPlan("restore", "close → drain → apply → readiness → evaluation → reopen")


def start_limits_restore(ctx: Context, uow: SqlUnitOfWork, dep: Deployment, row: Endpoint,
                         endpoint: EndpointSettings, actor: str) -> Deployment:
    """A restore of ``dep``'s release carrying the new limits (in the caller's transaction, which locks the row)."""
    cluster = ctx.ports.cluster
    if cluster is None:
        raise RuntimeError("no cluster access to render the manifest with the new limits")
    manifest = cluster.render(manifest_from_row(dep.release), endpoint, dep.release.tuple_hash)
    restore = create_deployment(ctx, uow, row, dep.release_id, "rollback", KIMI_OPS, dep.release_id,
                                rollback_of=dep.id, cause_id=dep.id)
    restore.applied_manifest, restore.manifest_hash = manifest.text, manifest.sha256
    uow.audit.record(at=ctx.clock.now(), actor=actor, action="limits.restore_started", subject=f"deployment:{restore.id}",
                     details={"of": dep.id, "sha256": manifest.sha256})
    return restore
