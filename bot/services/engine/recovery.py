"""Recovery after a restart or a takeover: continue a deployment from its stored state, or say why it cannot be.

The manifest to apply is stored before it is applied, and a deployment found rolling out is re-attached to its
rollout watch, not re-applied. A deployment whose stored state cannot be continued (its release or endpoint
settings no longer read, or a rollout with no stored manifest to watch) is marked ``interrupted`` with the
reason instead of being left holding its endpoint, so a person sees why and can roll back or retry.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.adapters.store.errors import store_unavailable
from bot.domain.read_models import DeploymentView
from bot.domain.rollout import RenderedManifest
from bot.domain.states import NEEDS_STORED_MANIFEST, State
from bot.logs import logger_for
from bot.services.context import Context
from bot.services.deployments import get_deployment
from bot.services.engine.run import snapshot
from bot.services.transitions import end

log = logger_for(__name__)


def resume_one(ctx: Context, deployment_id: int, advance: Callable[[int], DeploymentView]) -> DeploymentView:
    """Continue one in-flight deployment under the lease the calling thread holds, or mark it interrupted."""
    why = unresumable(ctx, deployment_id)
    if why is not None:
        interrupt(ctx, deployment_id, why)
        return get_deployment(ctx, deployment_id)
    try:
        return advance(deployment_id)
    except Exception:
        # Not the stored state (checked above) but e.g. the database going away: a later resume may succeed,
        # so the deployment keeps its endpoint rather than being ended by a transient fault.
        log.exception("could not resume deployment #%s", deployment_id)
        return get_deployment(ctx, deployment_id)


def unresumable(ctx: Context, deployment_id: int) -> str | None:
    """Why the stored state of a deployment cannot be continued, or ``None`` when it can."""
    with ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        if dep is None or State(dep.state).terminal:
            return None
        try:
            snap = snapshot(uow, dep)
        except Exception as exc:  # e.g. a release stored by a version whose tuple this one refuses
            if store_unavailable(exc):
                raise  # the database went away while reading: nothing is known to be wrong with the state
            log.warning("deployment #%s: stored state unreadable", deployment_id, exc_info=True)
            return f"its stored release or endpoint settings can no longer be read ({type(exc).__name__})"
    needs_manifest = snap.state in NEEDS_STORED_MANIFEST.get(snap.kind, frozenset())
    if needs_manifest and snap.applied_manifest is None:
        return f"no applied manifest is stored for its {snap.state.words} step, so what the cluster runs is unknown"
    if snap.applied_manifest is not None:
        try:
            RenderedManifest.from_text(snap.applied_manifest)
        except Exception as exc:
            return f"its stored manifest can no longer be read ({type(exc).__name__})"
    return None


def interrupt(ctx: Context, deployment_id: int, why: str) -> None:
    """Mark a deployment that cannot be resumed as interrupted (releasing its endpoint), with the reason."""
    try:
        with ctx.uow() as uow:
            dep = uow.deployments.get_for_update(deployment_id)
            if dep is None or State(dep.state).terminal:
                return
            was = State(dep.state)
            end(uow, ctx, dep, State.INTERRUPTED, reason=f"not resumed after a restart while {was.words}: {why}",
                details={"resumed": False})
            uow.commit()
    except Exception:
        log.exception("could not mark deployment #%s interrupted", deployment_id)
