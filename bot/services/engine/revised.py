"""Limits applied at a gate are a new rollout: its readiness passes before the ramp admits anyone.

Accepting the traffic gate's limits while users are still closed out applies a new manifest revision at once
(:mod:`bot.services.limits_apply`), and a new limit restarts the model. So when a deploy's ramp starts and its
manifest was revised after its readiness passed, the ramp first watches that revision's rollout and runs the
readiness suite again; a failure fails the deployment (which restores the previous release) before any user
reaches the candidate: close, drain, apply, readiness, and only then reopen.
"""

from __future__ import annotations

import time

from bot.domain.rollout import RenderedManifest
from bot.domain.states import State
from bot.services.context import require
from bot.services.engine.run import READINESS_ATTEMPTS, Runner, Snapshot, StateMoved, StepFailed


def revised_after_readiness(runner: Runner, snap: Snapshot) -> bool:
    """Whether the deployment's manifest has a revision newer than its passed readiness."""
    wanted = ("manifest.revised", f"deployment.{State.MODEL_GATE.value}")
    with runner.ctx.uow() as uow:
        # Newest first: which came last, the readiness that led to the model gate or a revision of the manifest.
        newest = next((a.action for a in uow.audit.list(subject=f"deployment:{snap.id}", limit=500)
                       if a.action in wanted), None)
    return newest == "manifest.revised"


def ready_again(runner: Runner, snap: Snapshot) -> None:
    """Watch the revised manifest's rollout, then run the readiness suite; raise :class:`StepFailed` if either fails."""
    ctx = runner.ctx
    cluster = require(ctx.ports.cluster, "cluster access")
    client = require(ctx.ports.endpoint, "endpoint access")
    if snap.applied_manifest is None:
        raise StepFailed("no applied manifest is stored for the revised rollout")
    with ctx.uow() as uow:
        since = list(uow.manifests.for_deployment(snap.id))[-1].at
    with runner.stoppable(snap) as stop:
        outcome = cluster.watch(snap.endpoint, RenderedManifest.from_text(snap.applied_manifest),
                                timeout_seconds=snap.endpoint.max_deploy_seconds,
                                on_progress=lambda p: runner.progress(snap, p), stop=stop, since=since)
    if outcome.status == "stopped":
        raise StateMoved("rollout watch stopped")
    if outcome.status != "succeeded":
        raise StepFailed(f"the rollout with the accepted limits {outcome.status.replace('_', ' ')}: {outcome.reason}")
    result = None
    for attempt in range(READINESS_ATTEMPTS):
        result = client.readiness(snap.endpoint)
        if result.ok:
            return
        if attempt + 1 < READINESS_ATTEMPTS:
            time.sleep(runner.readiness_pause)
    assert result is not None
    raise StepFailed(f"readiness with the accepted limits {result.summary}")
