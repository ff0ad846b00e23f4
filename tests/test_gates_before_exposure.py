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

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bot.adapters.cluster.rest import object_path
from bot.cli.demo import Tour
from bot.cli.shell import Shell
from bot.domain.admission import Admission
from bot.sandbox.gateway import Routed
from bot.sandbox.stack import APPROVER_1, CHANNEL, DEPLOYER, ENDPOINT, GROUPS, NAMESPACE, Sandbox
from bot.sandbox.traffic import FALLBACK_SERVICE
from bot.sandbox.users import COHORT_USER, USER
from bot.services.access import Identity
from bot.services.deployments import cancel, decide_gate, get_deployment, history, request_deploy
from bot.services.engine import Engine
from bot.services.errors import Refused
from tests.world_support import APPROVER, WAIT_SECONDS, SandboxWorld, in_background, joined, wait_until

# Whole-stack: every stand-in, background users, several deployments per test.
pytestmark = pytest.mark.timeout(600)



@dataclass
class World(SandboxWorld):
    sandbox: Sandbox
    engine: Engine

    def users_at_model(self) -> int:
        """User requests the Kimi K3 stand-in received (the bot's own carry no user field)."""
        seen = self.model.users()
        return seen[USER] + seen[COHORT_USER]

    def kimi_at_gateway(self, admission: str | None = None) -> int:
        """User requests the gateway sent to the Kimi K3 Service (under ``admission`` of the route, or any)."""
        return sum(n for (label, routed), n in self.gateway.counts_by_admission().items()
                   if routed.target == ENDPOINT and admission in (None, label))

    def applied(self) -> dict[str, Any]:
        obj = self.sandbox.stand_ins["kube"].rest().get(object_path("InferenceEndpointConfig", ENDPOINT, NAMESPACE))
        assert obj is not None
        return dict(obj)

    def route_admission(self) -> str:
        route = self.sandbox.stand_ins["kube"].rest().get(object_path("HTTPRoute", ENDPOINT, NAMESPACE))
        assert route is not None
        return str(route["metadata"]["annotations"]["kimi-ops.io/admission"])

    def stored(self, deployment_id: int) -> dict[str, Any]:
        with self.ctx.uow() as uow:
            text = uow.deployments.get(deployment_id).applied_manifest
        assert text
        (obj,) = [o for o in yaml.safe_load_all(text) if o["kind"] == "InferenceEndpointConfig"]
        return dict(obj)

    def admission_row(self) -> str:
        with self.ctx.uow() as uow:
            return str(uow.endpoints.get(ENDPOINT).admission)

    def deploy(self, release: str, *, until: str = "live") -> Any:
        return self.approve(request_deploy(self.ctx, release, None, Identity(DEPLOYER)).id, until=until)


def start_world(path: Path, *, database_url: str | None = None, users_per_second: float = 8.0,
                **endpoint: Any) -> World:
    overrides = {"database_url": database_url} if database_url else {}
    sandbox = Sandbox(path, users_per_second=users_per_second, settings_overrides=overrides,
                      endpoint_overrides=endpoint).start()
    return World(sandbox=sandbox, engine=Engine(sandbox.ctx, readiness_pause=0.2))


def restore_of(world: World, ended_id: int) -> Any:
    """The restore an ended deployment started (the rollback procedure kimi-ops ran for it, without its gate)."""
    found = [v for v in history(world.ctx, ENDPOINT) if v.id > ended_id and v.kind == "restore"]
    assert found, [(v.id, v.kind, v.state) for v in history(world.ctx, ENDPOINT)]
    return found[-1]


def assert_runs_exactly(world: World, deployment_id: int) -> None:
    """The object in the cluster is, field for field, the manifest stored for ``deployment_id``: limits included."""
    running, stored = world.applied(), world.stored(deployment_id)
    assert running["spec"] == stored["spec"]
    assert running["metadata"]["annotations"] == stored["metadata"]["annotations"]
    assert running["metadata"].get("labels") == stored["metadata"].get("labels")
    assert running["spec"]["worker"]["requestLimits"] == stored["spec"]["worker"]["requestLimits"]


# ---------------------------------------------------------------------------- closed out until the model gate


@pytest.fixture(params=["sqlite", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    url = request.getfixturevalue("fresh_pg_url") if request.param == "postgres" else None
    w = start_world(tmp_path / "sandbox", database_url=url,
                    ramp={"steps": [50], "soak_seconds": 3.0, "sample_seconds": 0.5})
    try:
        yield w
    finally:
        w.sandbox.stop()


def test_no_user_request_reaches_the_candidate_before_its_model_gate_is_approved(world: World) -> None:
    older, newer = world.releases
    world.deploy(older)
    wait_until("user requests reaching the live release", lambda: world.users_at_model() > 0)

    dep = request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id
    view = world.approve(dep, until="model_gate")
    # Applied, rolled out and ready: and users are on the fallback while it is judged.
    assert world.applied()["metadata"]["annotations"]["kimi-ops.io/release"] == newer
    assert world.route_admission() == "closed"
    at_gate = world.users_at_model()
    time.sleep(2.0)  # background users keep coming
    counts = world.gateway.counts_by_admission()
    assert world.kimi_at_gateway("closed") == 0
    assert counts[("closed", Routed(FALLBACK_SERVICE, False))] > 0 and counts[("closed", Routed(FALLBACK_SERVICE, True))] > 0
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
    assert counts[("internal", Routed(ENDPOINT, True))] > 0
    assert counts[("50%", Routed(ENDPOINT, False))] > 0 and counts[("50%", Routed(FALLBACK_SERVICE, False))] > 0
    wait_until("users on the new release", lambda: world.users_at_model() > at_gate)


# ---------------------------------------------------------------------------- every ending after apply restores


@pytest.fixture(scope="module")
def live_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One sandbox whose older release went live (with the traffic gate's limits accepted); each test ends a candidate."""
    w = start_world(tmp_path_factory.mktemp("endings") / "sandbox")
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


@pytest.fixture()
def quiet_world(tmp_path: Path) -> Iterator[World]:
    """No background users (a held request would hold theirs too): the long stream is the user."""
    w = start_world(tmp_path / "sandbox", users_per_second=0, drain_seconds=6)
    try:
        w.deploy(w.releases[0])
        yield w
    finally:
        w.model.release()
        w.sandbox.stop()


def test_the_drain_applies_nothing_until_a_running_request_finished(quiet_world: World) -> None:
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
    time.sleep(1.5)
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
    world = quiet_world
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
    stalled = world.engine.advance(dep)  # returns once the 6 s deadline passed with the request still running

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


def test_a_ramp_step_whose_objectives_break_returns_everyone_to_the_previous_release(tmp_path: Path) -> None:
    world = start_world(tmp_path / "sandbox", ramp={"steps": [50], "soak_seconds": 3.0, "sample_seconds": 0.5})
    try:
        older, newer = world.releases
        live = world.deploy(older)
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
            world.model.reset()  # the restored release answers again
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
    finally:
        world.sandbox.stop()
