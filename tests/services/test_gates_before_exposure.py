"""Gates before exposure, on the sandbox's real parts: users never meet a candidate nobody approved.

Every part is the sandbox's own: the kmock Kubernetes emulator with the HyperPod
operator simulator, the Gateway API gateway stand-in (which routes by the
HTTPRoute kimi-ops writes and counts every request per admission of the route
that took it), the OpenAI-compatible Kimi K3 stand-in (which counts requests
per OpenAI ``user`` field) and the fallback model behind it, background users
sending requests through the gateway (a quarter as the internal cohort), moto,
the capacity stand-in, SQLite or PostgreSQL, and signed Slack requests through
the shell where a person acts in Slack. The deployment engine is the
production one; people decide through the same services the Slack edge calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.adapters.store.models import Base
from bot.cli.demo_tour import Tour
from bot.cli.shell import Shell
from bot.domain.admission import Admission
from bot.sandbox.gateway import Routed
from bot.sandbox.stack import APPROVER_1, CHANNEL, DEPLOYER, ENDPOINT, GROUPS
from bot.sandbox.traffic import FALLBACK_SERVICE
from bot.services.access import Identity
from bot.services.deployments import cancel, decide_gate, get_deployment, history, request_deploy
from bot.services.errors import Refused
from tests.exposure_support import World, assert_runs_exactly, restore_of, start_world
from tests.world_support import APPROVER, in_background, joined, wait_until

# Whole-stack: every stand-in, background users, several deployments per test.
pytestmark = pytest.mark.timeout(600)


# ---------------------------------------------------------------------------- closed out until the model gate


@pytest.fixture(params=["sqlite", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    url = request.getfixturevalue("fresh_pg_url") if request.param == "postgres" else None
    # Twice the sandbox's users for half the soak: each step still sees as many users as the assertions on its
    # split need (about six of the cohort at ``internal``, eighteen others at 50 %), in half the wall time.
    w = start_world(tmp_path / "sandbox", database_url=url, users_per_second=16.0,
                    ramp={"steps": [50], "soak_seconds": 1.5, "sample_seconds": 0.5})
    try:
        yield w
    finally:
        w.sandbox.stop()


def test_no_user_request_reaches_the_candidate_before_its_model_gate_is_approved(world: World) -> None:
    older, newer = world.releases
    with world.endpoint_changed(ENDPOINT, ramp={"soak_seconds": 0}):  # only the candidate's ramp is looked at
        world.deploy(older)
    wait_until("user requests reaching the live release", lambda: world.users_at_model() > 0)

    dep = request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id
    view = world.approve(dep, until="model_gate")
    # Applied, rolled out and ready: and users are on the fallback while it is judged.
    assert world.applied()["metadata"]["annotations"]["kimi-ops.io/release"] == newer
    assert world.route_admission() == "closed"
    at_gate = world.users_at_model()
    cohort, others = ("closed", Routed(FALLBACK_SERVICE, True)), ("closed", Routed(FALLBACK_SERVICE, False))
    closed_out = world.gateway.counts_by_admission()

    def more_users_closed_out() -> bool:
        now = world.gateway.counts_by_admission()
        return now[cohort] >= closed_out[cohort] + 4 and now[others] >= closed_out[others] + 12

    wait_until("more users while closed out", more_users_closed_out)  # background users keep coming
    assert world.kimi_at_gateway("closed") == 0
    # Counted at the model server too: not one user request since it was closed, and every one it ever got
    # came through the gateway while the route let users in.
    assert world.users_at_model() == at_gate == world.kimi_at_gateway()

    model_report = view.pending
    assert model_report is not None and model_report.gate == "model"
    with world.ctx.uow() as uow:
        checks = {c["name"]: c for c in uow.gates.latest(dep, "model").report["checks"]}
    assert checks["admission.closed"]["status"] == "pass", checks["admission.closed"]

    view = world.approve(dep, until="traffic_gate")
    assert world.users_at_model() == at_gate  # the sweep hit the model directly; no user got through
    with world.ctx.uow() as uow:
        checks = {c["name"]: c for c in uow.gates.latest(dep, "traffic").report["checks"]}
    assert checks["admission.closed"]["status"] == "pass", checks["admission.closed"]

    world.approve(dep, until="live")
    counts = world.gateway.counts_by_admission()
    assert counts[("internal", Routed(ENDPOINT, False))] == 0  # the cohort first: ordinary users still on the fallback
    # The internal users read the cohort's token from its Secret (made anew when this deployment closed the route)...
    assert counts[("internal", Routed(ENDPOINT, True))] > 0
    token = world.sandbox.cohort()
    assert token is not None
    # ... and nothing kimi-ops stores holds it: not a row of any table (audit, events, gate reports, settings).
    with world.ctx.uow() as uow:
        stored = " ".join(str(row) for table in Base.metadata.sorted_tables for row in uow.session.execute(select(table)))
    assert token[1] not in stored
    assert counts[("50%", Routed(ENDPOINT, False))] > 0 and counts[("50%", Routed(FALLBACK_SERVICE, False))] > 0
    wait_until("users on the new release", lambda: world.users_at_model() > at_gate)


# ---------------------------------------------------------------------------- every ending after apply restores


@pytest.fixture(scope="module")
def live_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One sandbox whose older release went live (with the traffic gate's limits accepted); each test ends a candidate."""
    # No test here ramps (each candidate ends before its ramp), so the older release's own ramp needs no soak. Half the
    # exposure worlds' users: these tests only wait for a few users' requests to arrive (each user request costs the
    # users, the gateway and the model stand-in a few milliseconds of CPU, for as long as the module runs).
    w = start_world(tmp_path_factory.mktemp("endings") / "sandbox", users_per_second=4.0,
                    ramp={"steps": [], "soak_seconds": 0})
    try:
        w.deploy(w.releases[0])
        yield w
    finally:
        w.sandbox.stop()


def _reject_model_gate_in_slack(world: World, dep: int) -> None:
    world.approve(dep, until="model_gate")
    console = Shell(world.ctx, user=APPROVER_1, channel=CHANNEL, groups=GROUPS)
    try:
        console.app.deliver()
        console.new_output()  # numbers the gate message's buttons
        tour = Tour(console, lambda _line: None)
        tour.press(APPROVER_1, "Reject", "model", dep)
        out = console.handle("answers regressed")  # the reason modal, submitted; its restore runs before this returns
        assert f"You rejected the model gate of deployment #{dep}" in "\n".join(out)
    finally:
        console.close()


def _reject_traffic_gate(world: World, dep: int) -> None:
    view = world.approve(dep, until="traffic_gate")
    assert view.pending is not None
    decide_gate(world.ctx, dep, "traffic", "rejected", APPROVER, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash, reason="saturates too early")
    world.engine.advance(dep)


def _fail_rollout(world: World, dep: int) -> None:
    operator = world.sandbox.stand_ins["operator"]
    view = world.approve(dep, until="infrastructure_gate")
    assert view.pending is not None
    decide_gate(world.ctx, dep, "infrastructure", "approved", APPROVER, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash)
    operator.behaviour = "fail"
    thread, result = in_background(lambda: world.engine.advance(dep))
    try:
        # The candidate's rollout fails; the restore that follows rolls out like any other.
        wait_until("the failed rollout", lambda: get_deployment(world.ctx, dep).state == "failed")
    finally:
        operator.behaviour = "succeed"
    joined(thread, result)


def _cancel(world: World, dep: int) -> None:
    world.approve(dep, until="model_gate")
    cancel(world.ctx, dep, Identity(DEPLOYER))
    world.engine.advance(dep)


ENDINGS = {
    "model-gate-rejected-in-slack": (_reject_model_gate_in_slack, "rejected"),
    "traffic-gate-rejected": (_reject_traffic_gate, "rejected"),
    "rollout-failed": (_fail_rollout, "failed"),
    "cancelled": (_cancel, "cancelled"),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_each_ending_after_apply_restores_the_previous_release_byte_for_byte(live_world: World, ending: str) -> None:
    world = live_world
    older, newer = world.releases
    live = next(v for v in history(world.ctx, ENDPOINT) if v.state == "live")
    assert live.release == older
    before = world.applied()
    end, state = ENDINGS[ending]

    dep = request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id
    end(world, dep)

    ended = get_deployment(world.ctx, dep)
    assert ended.state == state, ended.state_reason
    assert ended.manifest_hash and ended.manifest_hash != live.manifest_hash  # the candidate had reached the cluster
    restore = restore_of(world, dep)
    assert restore.state == "live" and restore.release == older, restore.state_reason
    assert restore.manifest_hash == live.manifest_hash
    # The cluster runs the previous release's stored manifest again, limits and all, exactly as before the candidate.
    assert_runs_exactly(world, restore.id)
    assert_runs_exactly(world, live.id)
    assert world.applied()["spec"] == before["spec"]
    # Users are let back in to it.
    assert world.route_admission() == "open" and world.admission_row() == "open"
    reached = world.kimi_at_gateway("open")
    wait_until("users on the restored release", lambda: world.kimi_at_gateway("open") > reached)
    with world.ctx.uow() as uow:
        events = [e.kind for e in uow.events.for_deployment(dep)]
    assert "restore.started" in events


def test_a_user_reaching_the_candidate_while_closed_out_fails_its_gate_report(live_world: World) -> None:
    # The route edited by hand while the candidate waits at its model gate: the re-checked report counts the users.
    world = live_world
    newer = world.releases[1]
    dep = request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id
    world.approve(dep, until="model_gate")
    at_gate = world.users_at_model()
    world.ctx.ports.cluster.set_route(world.sandbox.endpoint, Admission.open(), "hand edit")
    wait_until("users reaching the candidate", lambda: world.users_at_model() > at_gate + 2)
    world.ctx.ports.cluster.set_route(world.sandbox.endpoint, Admission.closed(), "hand edit undone")

    model = world.engine.recheck(dep, "model", Identity(DEPLOYER)).pending
    assert model is not None and not model.approvable
    with world.ctx.uow() as uow:
        checks = {c["name"]: c for c in uow.gates.latest(dep, "model").report["checks"]}
    assert checks["admission.closed"]["status"] == "fail", checks["admission.closed"]
    assert "reached the candidate while users were closed out" in checks["admission.closed"]["reason"]
    with pytest.raises(Refused, match="failed or errored checks"):
        decide_gate(world.ctx, dep, "model", "approved", APPROVER, seen_report_hash=model.report_hash,
                    seen_release_hash=model.release_hash)
    decide_gate(world.ctx, dep, "model", "rejected", APPROVER, seen_report_hash=model.report_hash,
                seen_release_hash=model.release_hash, reason="users reached it")
    world.engine.advance(dep)
    restore = restore_of(world, dep)
    assert restore.state == "live", restore.state_reason
    assert_runs_exactly(world, restore.id)
