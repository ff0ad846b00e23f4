"""Gates before exposure, the drain and the ramp, on the sandbox's real parts (see test_gates_before_exposure).

The drain applies nothing over a running request and, past its deadline, waits for a person; a ramp step whose
objectives break returns every user to the previous release while ordinary users never met the candidate.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from slack_sdk import WebClient

from bot.adapters.cluster.rest import object_path
from bot.adapters.slack.notifier import SlackNotifier
from bot.cli.shell import Shell
from bot.sandbox.gateway import Routed
from bot.sandbox.slack_stub import SlackStub
from bot.sandbox.stack import APPROVER_1, CHANNEL, DEPLOYER, ENDPOINT, GROUPS, NAMESPACE
from bot.sandbox.users import UserTraffic
from bot.services.access import Identity
from bot.services.deployments import decide_gate, get_deployment, request_deploy
from tests.exposure_support import World, assert_runs_exactly, assert_settled, restore_of, settle, start_world
from tests.world_support import APPROVER, WAIT_SECONDS, in_background, joined, wait_until

# Whole-stack: every stand-in, background users, several deployments per test.
pytestmark = pytest.mark.timeout(600)


# ---------------------------------------------------------------------------- the drain


def _long_stream(url: str, done: list[float]) -> str:
    """A user's long streaming request through the gateway; returns the text it got, records when it ended."""
    body = {"messages": [{"role": "user", "content": "Write the long report."}], "max_tokens": 16, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=WAIT_SECONDS) as response:
        text = "".join(response.iter_text())
    done.append(time.monotonic())
    return text


def _applies(world: World) -> int:
    kube = world.sandbox.stand_ins["kube"]
    path = object_path("InferenceEndpointConfig", ENDPOINT, NAMESPACE)
    return sum(1 for r in kube.requests()
               if r.method == "PATCH" and r.url.path == path and "dryRun" not in r.params)


@pytest.fixture(scope="module")
def shared_quiet_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """No background users (a held request would hold theirs too): the long stream is the user. The older release
    is live; no test here ramps a candidate, so its own ramp needs no soak. The sandbox's drain deadline (30 s)."""
    w = start_world(tmp_path_factory.mktemp("drain") / "sandbox", users_per_second=0,
                    ramp={"steps": [], "soak_seconds": 0})
    try:
        w.live = w.deploy(w.releases[0])  # type: ignore[attr-defined]
        yield w
    finally:
        w.model.release()
        w.sandbox.stop()


@pytest.fixture()
def quiet_world(shared_quiet_world: World) -> Iterator[World]:
    """The module's quiet world as each test finds it: the older release live, users let in, nothing in flight; after
    the test, the candidate it left waiting at a gate is cancelled and the older release restored."""
    assert_settled(shared_quiet_world, shared_quiet_world.live.id)  # type: ignore[attr-defined]
    yield shared_quiet_world
    shared_quiet_world.model.release()
    settle(shared_quiet_world)


def test_the_drain_applies_nothing_until_a_running_request_finished(quiet_world: World) -> None:
    # The sandbox's drain deadline (30 s) is only a bound here: the drain ends when the request does.
    world = quiet_world
    newer = world.releases[1]
    world.model.hold()  # the request runs but produces nothing until released
    done: list[float] = []
    stream, got = in_background(lambda: _long_stream(str(world.sandbox.gateway_url), done))
    assert world.model.wait_for(lambda s: s.running == 1)
    applies = _applies(world)

    dep = request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id
    view = world.approve(dep, until="infrastructure_gate")
    assert view.pending is not None
    decide_gate(world.ctx, dep, "infrastructure", "approved", APPROVER, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash)
    engine, result = in_background(lambda: world.engine.advance(dep))
    wait_until("the drain", lambda: get_deployment(world.ctx, dep).state == "draining")
    scraped = world.model.stats().scrapes
    assert world.model.wait_for(lambda s: s.scrapes >= scraped + 5)  # the drain looked, again and again, at the request
    assert get_deployment(world.ctx, dep).state == "draining" and _applies(world) == applies  # nothing applied over it
    assert world.route_admission() == "closed"

    world.model.release()
    text = joined(stream, got)
    assert text.rstrip().endswith("data: [DONE]")  # the user's answer finished whole
    wait_until("the apply", lambda: _applies(world) > applies)
    applied_at = time.monotonic()
    assert done[0] <= applied_at
    assert joined(engine, result).state == "model_gate"


@pytest.mark.parametrize("choice", ["wait", "abort"])
def test_at_the_drain_deadline_the_deployment_waits_for_a_person(quiet_world: World, choice: str) -> None:
    # A drain deadline of a second: the request outlives it as it would any deadline (it runs until released).
    with quiet_world.endpoint_changed(ENDPOINT, drain_seconds=1):
        _at_the_drain_deadline(quiet_world, choice)


def _at_the_drain_deadline(world: World, choice: str) -> None:
    newer = world.releases[1]
    world.model.hold()
    done: list[float] = []
    stream, got = in_background(lambda: _long_stream(str(world.sandbox.gateway_url), done))
    assert world.model.wait_for(lambda s: s.running == 1)
    applies, spec = _applies(world), world.applied()["spec"]

    dep = request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id
    view = world.approve(dep, until="infrastructure_gate")
    assert view.pending is not None
    decide_gate(world.ctx, dep, "infrastructure", "approved", APPROVER, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash)
    stalled = world.engine.advance(dep)  # returns once the deadline passed with the request still running

    assert stalled.state == "drain_stalled", stalled.state_reason
    assert "nothing applied" in (stalled.state_reason or "")
    assert _applies(world) == applies and world.applied()["spec"] == spec and world.route_admission() == "closed"
    with world.ctx.uow() as uow:
        asked = [e.payload for e in uow.events.for_deployment(dep) if e.kind == "drain.stalled"]
    assert asked and f"/kimi drain wait {dep}" in asked[-1]["text"] and "nothing was applied" in asked[-1]["text"]
    assert stream.is_alive()  # the user's request still runs: it was never cut off

    world.model.release()
    assert joined(stream, got).rstrip().endswith("data: [DONE]")
    # A person chooses, in Slack.
    console = Shell(world.ctx, user=APPROVER_1, channel=CHANNEL, groups=GROUPS)
    try:
        console.handle(f"/kimi drain {choice} {dep}")
    finally:
        console.close()
    after = world.engine.advance(dep)
    if choice == "wait":
        assert after.state == "model_gate", after.state_reason
        assert _applies(world) > applies and world.route_admission() == "closed"
    else:
        assert after.state == "cancelled", after.state_reason
        assert _applies(world) == applies and world.applied()["spec"] == spec  # never applied
        assert world.route_admission() == "open"  # users are back on the running release


# ---------------------------------------------------------------------------- a ramp step that breaks


def test_a_ramp_step_whose_objectives_break_returns_everyone_to_the_previous_release(quiet_world: World) -> None:
    world = quiet_world
    # Users for this test alone (the drain tests' held request would hold theirs): twice the sandbox's users for half
    # the soak, so as many of the cohort's requests meet the failing candidate.
    users = UserTraffic(str(world.sandbox.gateway_url), cohort=world.sandbox.cohort, per_second=16.0).start()
    try:
        with world.endpoint_changed(ENDPOINT, ramp={"steps": [50], "soak_seconds": 1.5, "sample_seconds": 0.5}):
            _ramp_step_breaks(world)
    finally:
        users.stop()


def _ramp_step_breaks(world: World) -> None:
    older, newer = world.releases
    live = world.live  # type: ignore[attr-defined]
    dep = request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id
    world.approve(dep, until="traffic_gate")
    view = get_deployment(world.ctx, dep)
    assert view.pending is not None
    world.accept_limits(dep, view.pending.report_hash)
    decide_gate(world.ctx, dep, "traffic", "approved", APPROVER, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash)

    before = world.gateway.counts_by_admission()
    engine, result = in_background(lambda: world.engine.advance(dep))
    try:
        # The internal cohort meets the candidate, and the candidate starts failing them.
        wait_until("the internal cohort step", lambda: world.admission_row() == "internal")
        world.model.configure(fail_status=500)
        wait_until("the ramp to fail", lambda: get_deployment(world.ctx, dep).state == "failed")
    finally:
        world.model.configure(fail_status=None)  # the restored release answers again
    joined(engine, result)

    failed = get_deployment(world.ctx, dep)
    assert "ramp step internal broke its objectives: error rate" in (failed.state_reason or ""), failed.state_reason
    restore = restore_of(world, dep)
    assert restore.state == "live" and restore.release == older, restore.state_reason
    assert_runs_exactly(world, live.id)
    assert world.route_admission() == "open"
    during = world.gateway.counts_by_admission() - before
    assert during[("internal", Routed(ENDPOINT, True))] > 0  # the cohort met it (and got its errors)…
    assert during[("50%", Routed(ENDPOINT, False))] == 0  # …ordinary users never did
    reached = world.kimi_at_gateway("open")
    wait_until("users on the restored release", lambda: world.kimi_at_gateway("open") > reached)
    # Users were given back before any picture of the ramp was drawn: the notifier draws it afterwards.
    reports = world.ctx.settings.data_dir / "reports"
    assert not (reports / f"ramp-{ENDPOINT}-{dep}.png").exists()  # (a drain test's console drew the first deploy's)
    with SlackStub() as stub:
        SlackNotifier(WebClient(token="xoxb-t", base_url=stub.api_url), world.ctx.uow, world.ctx.clock,
                      plot_dir=reports).deliver_pending()
        (upload,) = [u for _, u in stub.files_in(CHANNEL) if u.filename == f"ramp-{ENDPOINT}-{dep}.png"]
    assert upload.data == (reports / f"ramp-{ENDPOINT}-{dep}.png").read_bytes()
