"""Limits accepted while a candidate ramps, on the sandbox's real parts (see test_gates_before_exposure).

The ramp stops where it is, closes the route (every user to the fallback), drains, applies the revision with the
new limits, watches its rollout on the HyperPod operator simulator, runs the readiness suite, and only then starts
again from the internal cohort. The gateway stand-in counts every request per admission of the route that took it,
so a user reaching Kimi K3 while the revision was applied but not yet checked would show as a count under
``closed``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.adapters.store.outbox import event_of
from bot.sandbox.gateway import Routed
from bot.sandbox.stack import DEPLOYER, ENDPOINT
from bot.sandbox.traffic import FALLBACK_SERVICE
from bot.services.access import Identity
from bot.services.deployments import endpoint_settings, request_deploy
from bot.services.traffic_gate import accept_proposed_limits
from tests.exposure_support import assert_runs_exactly, start_world
from tests.services.test_limits_procedure import propose_limits
from tests.world_support import APPROVER, in_background, joined, wait_until

# Whole-stack: every stand-in, background users, two deployments and a ramp run twice.
pytestmark = pytest.mark.timeout(600)


def test_limits_accepted_while_ramping_reach_users_only_after_readiness_and_the_ramp_starts_again(tmp_path: Path) -> None:
    world = start_world(tmp_path / "sandbox", users_per_second=16.0,
                        ramp={"steps": [50], "soak_seconds": 3, "sample_seconds": 0.5})
    try:
        older, newer = world.releases
        with world.endpoint_changed(ENDPOINT, ramp={"soak_seconds": 0}):  # only the candidate's ramp is looked at
            world.deploy(older)
        dep = request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id
        world.decide(world.approve(dep, until="traffic_gate"))  # the sweep's own proposal is taken at its gate
        engine, result = in_background(lambda: world.engine.advance(dep))
        wait_until("the internal cohort step", lambda: world.admission_row() == "internal")

        # A newer proposal (one request fewer at once) is accepted while users are on the candidate.
        limits = endpoint_settings(world.ctx, ENDPOINT).effective_request_limits
        wanted = limits.max_concurrent_requests - 1
        report_hash = propose_limits(world.ctx, dep, wanted, limits.max_queue_size)
        with world.ctx.uow() as uow:
            mark = uow.audit.latest_id()
        before = world.gateway.counts_by_admission()
        accepted = accept_proposed_limits(world.ctx, None, dep, APPROVER, seen_report_hash=report_hash)
        assert accepted.ramping and accepted.applied_sha256 is None  # nothing applied over the admitted users
        done = joined(engine, result, timeout=300)
        assert done.state == "live", done.state_reason

        # The cluster runs the revision with the new limits, exactly as stored for the deployment.
        assert world.applied()["spec"]["worker"]["requestLimits"]["maxConcurrentRequests"] == wanted
        assert_runs_exactly(world, dep)
        with world.ctx.uow() as uow:
            later = [(a.id, a.action, a.subject, dict(a.details or {}))
                     for a in reversed(uow.audit.list(limit=2000)) if a.id > mark]
        routes = [details["to"] for _, action, _, details in later if action == "endpoint.admission"]
        parts = {action: at for at, action, subject, _ in later
                 if subject == f"deployment:{dep}" and action.startswith("limits.")}
        first_admitted = next(at for at, action, _, details in later
                              if action == "endpoint.admission" and details["to"] != "closed")
        # Closed, applied, ready, and only then the ramp again from its first step: the cohort, then each share.
        assert routes == ["closed", "internal", "50%", "open"]
        assert (parts["limits.users_closed"] < parts["limits.drained"] < parts["limits.applied"]
                < parts["limits.ready"] < first_admitted)
        during = world.gateway.counts_by_admission() - before
        # Users kept coming while it was closed, to the fallback only: none met the revision before its readiness.
        assert during[("closed", Routed(FALLBACK_SERVICE, False))] > 0
        assert during[("closed", Routed(ENDPOINT, False))] == during[("closed", Routed(ENDPOINT, True))] == 0
        # The thread said why users were closed out, and what came next.
        with world.ctx.uow() as uow:
            said = [getattr(event_of(row), "message", "") for row in uow.events.for_deployment(dep)]
        assert any("limits accepted while ramping: the ramp stops and users are closed out" in m for m in said), said
        assert any("readiness with the accepted limits" in m for m in said)
    finally:
        world.sandbox.stop()
