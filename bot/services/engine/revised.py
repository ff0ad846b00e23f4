"""Limits applied at a gate are a new rollout: its readiness passes before the ramp admits anyone.

Accepting the traffic gate's limits while users are still closed out applies a new manifest revision at once
(:mod:`bot.services.limits_apply`), and a new limit restarts the model. So when a deploy's ramp starts and its
manifest was revised after its readiness passed, the ramp first watches that revision's rollout and runs the
readiness suite again; a failure fails the deployment (which restores the previous release) before any user
reaches the candidate: close, drain, apply, readiness, and only then reopen. As after a deploy's first readiness,
the closed-door count starts again from there: the revision started a new model process, whose finished-request
counter starts from zero and holds the readiness completions kimi-ops just sent.
"""

from __future__ import annotations

import time
from dataclasses import replace

from bot.domain.own_requests import OwnRequests
from bot.domain.rollout import RenderedManifest
from bot.domain.states import State
from bot.services.context import require
from bot.services.engine.closed_door import StoredLedger
from bot.services.engine.run import READINESS_ATTEMPTS, Runner, Snapshot, StateMoved, StepFailed


def revised_after_readiness(runner: Runner, snap: Snapshot) -> bool:
    """Whether the deployment's manifest has a revision newer than its passed readiness."""
    wanted = ("manifest.revised", f"deployment.{State.MODEL_GATE.value}")
    with runner.ctx.uow() as uow:
        # Newest first: which came last, the readiness that led to the model gate or a revision of the manifest.
        newest = next((a.action for a in uow.audit.list(subject=f"deployment:{snap.id}", limit=500)
                       if a.action in wanted), None)
    return newest == "manifest.revised"


def ready_again(runner: Runner, snap: Snapshot) -> Snapshot:
    """Watch the revised manifest's rollout, then run the readiness suite; raise :class:`StepFailed` if either fails.

    Returns the deployment with its closed-door count started again from the revision's readiness.
    """
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
    ledger = StoredLedger(ctx, snap.id)  # kimi-ops's own completions: the closed-door proof must not count them as users
    for attempt in range(READINESS_ATTEMPTS):
        ledger.sent()
        result = client.readiness(snap.endpoint)
        ledger.settled("answered" if result.ok else "uncertain")
        if result.ok:
            return _count_from_here(runner, snap)
        if attempt + 1 < READINESS_ATTEMPTS:
            time.sleep(runner.readiness_pause)
    assert result is not None
    raise StepFailed(f"readiness with the accepted limits {result.summary}")


def _count_from_here(runner: Runner, snap: Snapshot) -> Snapshot:
    """Start the closed-door count again at the revised model's readiness (users were closed out throughout)."""
    baseline = runner.metrics(snap)
    finished = baseline.requests_finished if baseline is not None else None
    with runner.ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        dep.closed_baseline = finished
        dep.own_requests = dep.own_uncertain = 0
        uow.commit()
    return replace(snap, closed_baseline=finished, own=OwnRequests())
