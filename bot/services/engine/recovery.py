"""Recovery after a restart or a takeover: continue a deployment from its stored state, or say why it cannot be.

The manifest to apply is stored before it is applied, and a deployment found rolling out is re-attached to its
rollout watch, not re-applied. A deployment whose stored state cannot be continued (its release or endpoint
settings no longer read, or a rollout with no stored manifest to watch) is marked ``interrupted`` with the
reason instead of being left holding its endpoint, so a person sees why and can roll back or retry.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from bot.adapters.store.errors import store_unavailable
from bot.domain.read_models import DeploymentView
from bot.domain.rollout import RenderedManifest
from bot.domain.states import NEEDS_STORED_MANIFEST, State
from bot.logs import logger_for
from bot.services.context import Context
from bot.services.deployments import get_deployment
from bot.services.engine.leases import waits_for_person
from bot.services.engine.run import snapshot
from bot.services.transitions import end

log = logger_for(__name__)


@dataclass(frozen=True)
class Resumption:
    """What a resume did with one in-flight deployment: took it (and where it stands now), or left it, and why."""

    view: DeploymentView
    taken: bool
    waits_for_person: bool = False  # nothing to do until a person decides (the stored state was checked)
    driven_by: str | None = None  # left: the replica whose lease is alive …
    driven_until: dt.datetime | None = None  # … until then, unless it renews it


def waits_for_a_person(ctx: Context, deployment_id: int) -> bool:
    """Whether the deployment waits for a person (a gate's decision, a stalled drain, a ramp step): nothing to drive."""
    with ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        return dep is not None and waits_for_person(uow, dep)


def left_to_its_driver(ctx: Context, deployment_id: int) -> Resumption:
    """A deployment whose endpoint's lease another replica (or thread) holds, with who holds it and until when."""
    with ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        lease = uow.leases.get(dep.endpoint_id) if dep is not None else None
        holder, until = (lease.holder, lease.expires_at) if lease is not None else (None, None)
    if until is not None and until.tzinfo is None:  # SQLite hands back what was stored in UTC without its zone
        until = until.replace(tzinfo=dt.UTC)
    return Resumption(get_deployment(ctx, deployment_id), taken=False, driven_by=holder, driven_until=until)


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
