"""A cancel made elsewhere ends a drain or a gate run under way at once, not when that step would have ended.

The sandbox's real parts (kmock, the gateway, the OpenAI-compatible stand-in), a production engine driving on a
thread, and a cancel made outside it (as another replica answering ``/kimi cancel`` would: only the database
says so, and the engine reads it at its lease heartbeat). Each step is made effectively endless, so only the
cancel can end it: a drain with an hour's deadline and a user's request held at the model, and a traffic gate's
sweep with a day's budget. On SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from bot.adapters.cluster.rest import object_path
from bot.domain.sweep import SweepPlan
from bot.sandbox.stack import DEPLOYER, ENDPOINT, NAMESPACE, SANDBOX_SWEEP, Sandbox
from bot.services.access import Identity
from bot.services.deployments import cancel, get_deployment, history, request_deploy
from bot.services.engine import Engine
from tests.cli_support import QUICK_PREFILL, QUICK_SWEEP, QUICK_SWEEP_METRICS_SECONDS
from tests.exposure_support import World, assert_runs_exactly, assert_settled, restore_of, settle
from tests.world_support import WAIT_SECONDS, in_background, joined, wait_until

pytestmark = pytest.mark.timeout(400)

ENDLESS_SWEEP = {**SANDBOX_SWEEP, "steady_seconds": 86_400, "steady_requests_per_slot": 1_000_000,
                 "max_requests": 10_000_000, "max_seconds": 86_400}
"""The traffic gate's sweep with a day's budget: its first level alone would run all day."""


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def shared_world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One world per database for the module. No background users (a held request would hold theirs too); an hour's
    drain deadline; the older release live, deployed with the quick sweep and prefill (the endless sweep is set for
    the candidate only). Every test here ends with the older release live again and users let in."""
    settings: dict[str, Any] = {"lease_seconds": 4, "lease_heartbeat_seconds": 1, "traffic_sweep": QUICK_SWEEP}
    if request.param == "postgres":
        settings["database_url"] = request.getfixturevalue("module_pg_url")
    sandbox = Sandbox(tmp_path_factory.mktemp(f"cancel-{request.param}") / "sandbox", users_per_second=0,
                      settings_overrides=settings, sweep_metrics_seconds=QUICK_SWEEP_METRICS_SECONDS,
                      endpoint_overrides={"drain_seconds": 3600, "ramp": {"steps": [], "soak_seconds": 0}}).start()
    sandbox.stand_ins["openai"].configure(**QUICK_PREFILL)
    w = World(sandbox=sandbox, engine=Engine(sandbox.ctx, readiness_pause=0.2))
    try:
        w.live = w.deploy(w.releases[0])  # type: ignore[attr-defined]
        yield w
    finally:
        w.model.release()
        sandbox.stop()


@pytest.fixture()
def world(shared_world: World) -> Iterator[World]:
    """The module's world as each test finds it: the older release live, users let in, no deployment in flight."""
    assert_settled(shared_world, shared_world.live.id)  # type: ignore[attr-defined]
    yield shared_world
    shared_world.model.release()
    settle(shared_world)


def _applies(world: World) -> int:
    kube = world.sandbox.stand_ins["kube"]
    path = object_path("InferenceEndpointConfig", ENDPOINT, NAMESPACE)
    return sum(1 for r in kube.requests() if r.method == "PATCH" and r.url.path == path and "dryRun" not in r.params)


def _user_stream(url: str) -> str:
    """A user's streamed request through the gateway; the text it got."""
    body = {"messages": [{"role": "user", "content": "Write the long report."}], "max_tokens": 16, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=WAIT_SECONDS * 3) as response:
        return "".join(response.iter_text())


def _state(world: World, deployment_id: int) -> str:
    return get_deployment(world.ctx, deployment_id).state


def test_a_cancel_during_a_drain_reopens_at_once_without_waiting_for_the_running_request(world: World) -> None:
    newer = world.releases[1]
    world.model.hold()  # the user's request runs, producing nothing, until released: the drain cannot end
    stream, got = in_background(lambda: _user_stream(str(world.sandbox.gateway_url)))
    assert world.model.wait_for(lambda s: s.running == 1)
    applies, spec = _applies(world), world.applied()["spec"]
    dep = world.approve(request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id, until="infrastructure_gate").id
    world.decide(get_deployment(world.ctx, dep))
    engine, result = in_background(lambda: world.engine.advance(dep))
    wait_until("the drain", lambda: _state(world, dep) == "draining")
    scraped = world.model.stats().scrapes
    assert world.model.wait_for(lambda s: s.scrapes >= scraped + 2)  # the drain is looking at the running request

    cancel(world.ctx, dep, Identity(DEPLOYER))  # elsewhere: the engine learns it from the database
    ended = joined(engine, result, timeout=WAIT_SECONDS)  # without the fix, the drain waits out its hour
    assert ended.state == "cancelled", ended.state_reason
    assert world.route_admission() == "open"  # users are back on the running release
    assert _applies(world) == applies and world.applied()["spec"] == spec  # nothing applied
    assert stream.is_alive()  # the user's request was never cut off

    world.model.release()
    assert joined(stream, got).rstrip().endswith("data: [DONE]")


def test_a_cancel_during_the_traffic_gate_sweep_stops_it_and_the_restore_runs(world: World) -> None:
    newer = world.releases[1]
    dep = world.approve(request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id, until="model_gate").id
    world.decide(get_deployment(world.ctx, dep))
    # An engine whose settings plan the endless sweep (the live release's own gate ran the sandbox's short one).
    endless = replace(world.ctx, settings=world.ctx.settings.model_copy(
        update={"traffic_sweep": SweepPlan.model_validate(ENDLESS_SWEEP)}))
    engine, result = in_background(lambda: Engine(endless, readiness_pause=0.2).advance(dep))

    def sweeping() -> bool:
        with world.ctx.uow() as uow:
            row = uow.deployments.get(dep)
            return row.state == "traffic_gate" and (row.own_requests or 0) >= 3

    wait_until("the sweep's answers", sweeping)
    cancel(world.ctx, dep, Identity(DEPLOYER))
    joined(engine, result, timeout=WAIT_SECONDS * 2)  # without the fix, the sweep runs its day first
    cancelled = get_deployment(world.ctx, dep)
    assert cancelled.state == "cancelled", cancelled.state_reason
    restore = restore_of(world, dep)
    assert restore.state == "live", restore.state_reason
    assert_runs_exactly(world, world.live.id)  # type: ignore[attr-defined]
    assert world.route_admission() == "open"
    with world.ctx.uow() as uow:
        assert [g.gate for g in uow.gates.for_deployment(dep)].count("traffic") == 0  # the stopped run stored nothing
        row = uow.deployments.get(dep)
        assert (row.own_requests or 0) >= 3 and (row.own_uncertain or 0) <= 1  # …but every request it sent


def test_a_cancel_during_the_model_gate_gives_way_while_its_requests_hang_at_the_model(world: World) -> None:
    newer = world.releases[1]
    dep = world.approve(request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id, until="infrastructure_gate").id
    world.decide(get_deployment(world.ctx, dep))
    engine, result = in_background(lambda: world.engine.advance(dep))
    wait_until("the model gate", lambda: _state(world, dep) == "model_gate", poll=0.02)
    world.model.hold()  # the evaluation's requests hang at the model: no token comes (each may wait 180 s)
    assert world.model.wait_for(lambda s: s.running > 0, timeout=WAIT_SECONDS)

    cancel(world.ctx, dep, Identity(DEPLOYER))

    def restore_draining() -> bool:
        found = [v for v in history(world.ctx, ENDPOINT) if v.id > dep and v.kind == "restore"]
        return bool(found) and found[-1].state == "draining"

    # The restore is under way while the abandoned run's requests still hang: it waits for them, applying nothing.
    wait_until("the restore draining", restore_draining)
    assert world.model.stats().running > 0
    world.model.release()
    joined(engine, result, timeout=WAIT_SECONDS * 2)
    assert restore_of(world, dep).state == "live"
    assert_runs_exactly(world, world.live.id)  # type: ignore[attr-defined]
    with world.ctx.uow() as uow:
        assert "model" not in [g.gate for g in uow.gates.for_deployment(dep)]  # the stopped run stored nothing
        row = uow.deployments.get(dep)
        assert (row.own_requests or 0) + (row.own_uncertain or 0) > 0  # …but what it sent is counted
