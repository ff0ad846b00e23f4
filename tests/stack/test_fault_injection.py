"""Fault injection: each case is one stand-in misbehaving on purpose while a deployment runs. One table, easy to extend.

The world is :class:`tests.fault_support.FaultSandbox` (the sandbox seeded as the
sandbox is, with kimi-ops reaching every stand-in through a proxy the test makes
misbehave) on PostgreSQL, built once per module with its older release live; each
case deploys the newer one into a fault and must end in ``error`` or a clear wait,
never ``pass``, never a lost row, never a held endpoint without a way out. Every
case leaves the world as it found it (the older release live, users let in, nothing
in flight, no incident open), which the next case checks before it starts.

A new finding is one more row of :data:`CASES`: which stand-in breaks, how, at
which step, and what a person must be able to read and do afterwards.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from bot.domain.states import State
from bot.sandbox.stack import ADMIN, DEPLOYER, ENDPOINT, NAMESPACE
from bot.services.access import Identity
from bot.services.admission import STUCK
from bot.services.deployments import cancel, get_deployment, history, request_deploy
from bot.services.engine import Engine
from bot.services.errors import Unavailable
from tests import world_support
from tests.cli_support import QUICK_SWEEP
from tests.fault_support import (
    ECR_503,
    KUBE_500,
    S3_500,
    VLLM_500,
    FaultProxy,
    FaultSandbox,
    garbage,
    hang,
    unreachable,
)
from tests.world_support import SandboxWorld, in_background, joined

pytestmark = pytest.mark.timeout(900)

WAIT_SECONDS = 120  # a bound on waiting for the engine in another thread, not a performance expectation
wait_until = functools.partial(world_support.wait_until, timeout=WAIT_SECONDS, poll=0.05)
APPLY = rf"PATCH /apis/[^ ]+/namespaces/{NAMESPACE}/inferenceendpointconfigs/{ENDPOINT}\?(?![^ ]*dryRun)"


@dataclass
class World(SandboxWorld):
    sandbox: FaultSandbox
    engine: Engine
    felt: list[FaultProxy] = field(default_factory=list)  # proxies whose fault the case must see met

    def advance(self, dep: int) -> Any:
        return self.engine.advance(dep)

    def approve(self, dep: int, gate: str) -> None:
        view = get_deployment(self.ctx, dep)
        assert view.pending is not None and view.pending.gate == gate, (view.state, view.state_reason)
        self.decide(view)

    def to_gate(self, dep: int, gate: str) -> None:
        """Advance and approve until ``gate`` waits for a decision."""
        view = self.advance(dep)
        while view.pending is None or view.pending.gate != gate:
            assert view.pending is not None, (view.state, view.state_reason)
            self.approve(dep, view.pending.gate)
            view = self.advance(dep)

    def incident(self) -> str | None:
        with self.ctx.uow() as uow:
            row = uow.endpoints.get(ENDPOINT)
            found = uow.incidents.open_for(row.id, STUCK)
            return None if found is None else str(found.reason)

    def admission(self) -> str:
        with self.ctx.uow() as uow:
            return str(uow.endpoints.get(ENDPOINT).admission)

    def events(self, dep: int) -> list[tuple[str, dict[str, Any]]]:
        with self.ctx.uow() as uow:
            return [(e.kind, dict(e.payload)) for e in uow.events.for_deployment(dep)]

    def states_audited(self, dep: int) -> list[str]:
        with self.ctx.uow() as uow:
            rows = reversed(uow.audit.list(subject=f"deployment:{dep}", limit=500))
            return [a.action.removeprefix("deployment.") for a in rows if a.action.startswith("deployment.")]

    def live(self) -> str:
        (live,) = [v for v in history(self.ctx, ENDPOINT, limit=100) if v.state == State.LIVE]
        return live.release


class Background:
    """``engine.advance`` on a thread: the test watches the deployment wait, heals the fault, then joins."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self.thread, self.result = in_background(work)

    def join(self) -> Any:
        return joined(self.thread, self.result, WAIT_SECONDS)


@pytest.fixture(scope="module")
def world(module_pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The fault world, its older release live; built once for every case of the module."""
    # No case reaches a ramp or a sweep (each ends at or before the model gate), so the older release's own ramp needs
    # no soak and its traffic gate the quick sweep.
    sandbox = FaultSandbox(tmp_path_factory.mktemp("faults") / "sandbox", database=module_pg_url,
                           settings_overrides={"traffic_sweep": QUICK_SWEEP},
                           endpoint_overrides={"drain_seconds": 2, "route_accept_seconds": 10,
                                               "ramp": {"steps": [], "soak_seconds": 0}})
    sandbox.start()
    w = World(sandbox=sandbox, engine=Engine(sandbox.ctx, readiness_pause=0.2))
    try:
        older, _ = w.releases
        dep = request_deploy(w.ctx, older, None, Identity(DEPLOYER)).id
        view = w.advance(dep)
        while view.state != State.LIVE:
            assert view.pending is not None, (view.state, view.state_reason)
            w.approve(dep, view.pending.gate)
            view = w.advance(dep)
        yield w
    finally:
        sandbox.stop()


# ---------------------------------------------------------------------------------------------- the table
Heal = Callable[[], None]


def proxy(name: str, fault: Any) -> Callable[[World], Heal]:
    def inject(w: World) -> Heal:
        p = w.sandbox.proxies[name]
        p.fail(fault)
        if fault.kind != "unreachable":  # a refused connection never reaches the proxy to be counted
            w.felt.append(p)
        return p.heal
    return inject


def model_knob(**changes: Any) -> Callable[[World], Heal]:
    """The model stand-in's own misbehaviour (a stream cut midway, an error event mid-stream)."""
    def inject(w: World) -> Heal:
        before = {k: getattr(w.model.behaviour, k) for k in changes}
        w.model.configure(**changes)
        return lambda: w.model.configure(**before)
    return inject


def database_blip(seconds: float) -> Callable[[World], Heal]:
    """The database unreachable for a moment: every connection cut, new ones refused, then back."""
    def inject(w: World) -> Heal:
        db = w.sandbox.proxies["db"]
        db.fail(unreachable())
        w.felt.append(db)
        timer = threading.Timer(seconds, db.heal)
        timer.start()

        def heal() -> None:
            timer.cancel()
            db.heal()
        return heal
    return inject


@dataclass(frozen=True)
class Case:
    id: str
    inject: Callable[[World], Heal]
    during: str  # the step that meets the fault: a gate's checks, "closing", "rollout" (after the apply) or "readiness"
    says: str  # what a person reads (the gate's check, the state's reason or the thread's progress line), one line
    ends: str  # the deployment's state once the fault has done its worst: a gate waiting (not approvable), "failed", or
    # "drain_stalled" or "rolling_out" (a clear wait that says why), or "model_gate" (it carries on once the fault passed)
    pages: bool = False  # the on-call group is paged: users stay closed out until a person acts


CASES: list[Case] = [
    Case("s3-500-at-artifact-gate", proxy("s3", S3_500), "artifact_gate", "We encountered an internal error", "artifact_gate"),
    Case("s3-unreachable-at-artifact-gate", proxy("s3", unreachable()), "artifact_gate", "cannot reach S3", "artifact_gate"),
    Case("ecr-503-at-artifact-gate", proxy("ecr", ECR_503), "artifact_gate", "Service is unavailable", "artifact_gate"),
    Case("ecr-unreachable-at-artifact-gate", proxy("ecr", unreachable()), "artifact_gate", "cannot reach ECR", "artifact_gate"),
    Case("kube-500-at-infrastructure-gate", proxy("kube", KUBE_500), "infrastructure_gate",
         "HTTP 500: etcdserver: request timed out", "infrastructure_gate"),
    Case("kube-unreachable-at-infrastructure-gate", proxy("kube", unreachable()), "infrastructure_gate",
         "Kubernetes API", "infrastructure_gate"),
    Case("kube-500-while-closing", proxy("kube", KUBE_500), "closing",
         # The first call of setting the route reads it back (the cohort token it carries) before the apply.
         "could not set kimi-prod's route to open: reading HTTPRoute/kimi-prod in model-serving failed: "
         "HTTP 500: etcdserver: request timed out", "failed", pages=True),
    Case("kube-500-mid-rollout", proxy("kube", KUBE_500), "rollout", "HTTP 500: etcdserver: request timed out", "rolling_out"),
    Case("kube-unreachable-mid-rollout", proxy("kube", unreachable()), "rollout", "unreachable", "rolling_out"),
    Case("model-metrics-hang-while-draining", proxy("model", hang()), "draining", "drain deadline passed (metrics unavailable)",
         "drain_stalled"),
    Case("database-cut-mid-rollout", database_blip(1.0), "rollout", "", "model_gate"),
    Case("model-500-at-readiness", proxy("model", VLLM_500), "readiness", "answered HTTP 500", "failed", pages=True),
    Case("model-garbage-at-readiness", proxy("model", garbage()), "readiness", "did not answer an OpenAI model list", "failed",
         pages=True),
    Case("model-hangs-at-readiness", proxy("model", hang()), "readiness", "(timeout): no answer from", "failed", pages=True),
    Case("model-stream-cut-midway", model_knob(cut_after_tokens=1), "readiness", "the stream ended without a finish reason",
         "failed", pages=True),
]


# Where the fault is met: the gate approved just before it (None: the first step), and whether it is met after the apply.
MEETS = {"artifact_gate": None, "infrastructure_gate": "artifact", "closing": "infrastructure", "draining": "infrastructure"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_fault_ends_in_error_or_a_clear_wait_never_pass(world: World, case: Case) -> None:
    assert_settled(world)
    world.felt.clear()
    _, newer = world.releases
    dep = request_deploy(world.ctx, newer, None, Identity(DEPLOYER)).id
    heal: Heal | None = None
    try:
        if case.during in MEETS:
            if (before := MEETS[case.during]) is not None:
                world.to_gate(dep, before)
                world.approve(dep, before)
            heal = case.inject(world)
            view, paged = world.advance(dep), world.incident() is not None
        else:  # past the apply: the fault starts with the first request after the apply went through
            world.to_gate(dep, "infrastructure")
            world.approve(dep, "infrastructure")
            armed: list[Heal] = []
            world.sandbox.proxies["kube"].after(APPLY, lambda: armed.append(case.inject(world)))
            running = Background(lambda: world.advance(dep))
            wait_until("the fault", lambda: bool(armed))
            heal = armed[0]
            view, paged = during_the_fault(world, dep, case, running, heal)
        check_outcome(world, dep, view, case)
        assert paged == case.pages, f"paged: {paged}, incident: {world.incident()}"
        assert all(p.met for p in world.felt), "the fault was never met: the case proved nothing"
    finally:
        if heal is not None:
            heal()
        way_out(world, dep)
    assert_settled(world)
    assert_no_lost_rows(world, dep)


def during_the_fault(world: World, dep: int, case: Case, running: Background, heal: Heal) -> tuple[Any, bool]:
    """Past the apply: watch the deployment meet the fault; heal it once it waits (the wait is what is tested)."""
    # Each look below reads the database, and the fault lasts seconds (a readiness timeout, the rollout's retries):
    # five looks a second, not fifty, cost a tenth of the CPU and answer as soon as it matters.
    if case.ends == State.ROLLING_OUT:
        wait_until("a progress line saying what is wrong", lambda: any(
            kind == "rollout.progress" and case.says in payload.get("message", "") and "retrying" in payload["message"]
            for kind, payload in world.events(dep)), poll=0.2)
        view = get_deployment(world.ctx, dep)
        assert view.state == State.ROLLING_OUT, (view.state, view.state_reason)  # no verdict without the API
        paged = world.incident() is not None
        heal()
        view = running.join()
        assert view.state == State.MODEL_GATE, (view.state, view.state_reason)  # and it carries on once the API answers
        return view, paged
    if case.ends == State.MODEL_GATE:
        try:
            view = running.join()
        except Unavailable as exc:  # the step's own write met the outage: left in flight, never failed for it
            assert "carries on once the database answers" in str(exc)
            view = taken_over(world, dep)
        assert view.state == State.MODEL_GATE, (view.state, view.state_reason)
        return view, world.incident() is not None
    wait_until("the deployment to fail", lambda: get_deployment(world.ctx, dep).state == State.FAILED, poll=0.2)
    if case.pages:
        # The restore meets the same fault: users stay closed out, and the on-call group must hear of it.
        wait_until("a page", lambda: world.incident() is not None, poll=0.2)
    paged = world.incident() is not None
    heal()
    running.join()
    return get_deployment(world.ctx, dep), paged


def taken_over(world: World, dep: int) -> Any:
    """What a replica's takeover round does with a deployment its driver dropped: resume it, again until it moves on."""
    def one_round() -> Any:
        try:
            view = world.engine.resume(dep)
        except (OperationalError, Unavailable):  # the database is not back yet: the next round tries again
            return None
        return view if view.state != State.ROLLING_OUT else None

    return wait_until("a takeover of the deployment", one_round, poll=0.2)


def check_outcome(world: World, dep: int, view: Any, case: Case) -> None:
    if case.ends in ("artifact_gate", "infrastructure_gate"):
        assert view.state == case.ends, (view.state, view.state_reason)
        assert view.pending is not None and not view.pending.approvable  # never a pass: nobody can approve it
        with world.ctx.uow() as uow:
            report = uow.gates.latest(dep, State(case.ends).gate).report
        broken = [c for c in report["checks"] if c["status"] in ("error", "fail")]
        assert broken, report
        text = " | ".join(f"{c['name']}: {c['reason']}" for c in broken)
        assert case.says in text, text
        for check in broken:
            assert_readable(check["reason"])
    elif case.ends in (State.FAILED, State.DRAIN_STALLED):
        reason = view.state_reason or ""
        assert view.state == case.ends and case.says in reason, (view.state, reason)
        assert_readable(reason)


def assert_readable(text: str) -> None:
    """What a person reads: no exception dumps, no HTTP header blocks, no Python reprs of connection pools."""
    for dump in ("HTTP response headers", "HTTPHeaderDict", "Reason: ", "Traceback", "object at 0x", "HTTPConnectionPool",
                 "urllib3", "MaxRetryError"):
        assert dump not in text, text
    assert "\n" not in text.strip(), text


def way_out(world: World, dep: int) -> None:
    """What a person does afterwards: cancel a waiting deployment, or open admission again after a page."""
    view = get_deployment(world.ctx, dep)
    if view.in_flight:
        cancel(world.ctx, dep, Identity(ADMIN))
        world.advance(dep)  # a cancel after the apply restores the older release
    restoring = [v for v in history(world.ctx, ENDPOINT, limit=5) if v.in_flight]
    for v in restoring:
        world.advance(v.id)
    if world.incident() is not None:
        from bot.services.admission import override_admission

        override_admission(world.ctx, ENDPOINT, "open", "fault healed, checked by hand", Identity(ADMIN))


def assert_settled(world: World) -> None:
    """The world as every case finds it: the older release live, users let in, nothing in flight, nobody paged."""
    older, _ = world.releases
    assert not [(v.id, v.state) for v in history(world.ctx, ENDPOINT, limit=10) if v.in_flight]
    assert world.live() == older
    assert world.admission() == "open"
    assert world.incident() is None


def assert_no_lost_rows(world: World, dep: int) -> None:
    """Every move of the deployment is audited once and announced once, in order, and it ended."""
    audited = world.states_audited(dep)
    announced = [p["to"] for kind, p in world.events(dep) if kind == "deployment.state"]
    assert audited == announced, (audited, announced)
    assert audited[0] == "artifact_gate" and State(audited[-1]).terminal, audited
