"""The sandbox world the gates-before-exposure modules share: every real part, a production engine, and the
questions those tests ask of it (what reached the model, what the route admits, what runs against what was stored).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bot.adapters.cluster.rest import object_path
from bot.sandbox.stack import DEPLOYER, ENDPOINT, NAMESPACE, Sandbox
from bot.sandbox.users import COHORT_USER, USER
from bot.services.access import Identity
from bot.services.deployments import cancel, history, request_deploy
from bot.services.engine import Engine
from tests.cli_support import QUICK_PREFILL, QUICK_SWEEP, QUICK_SWEEP_METRICS_SECONDS
from tests.world_support import WAIT_SECONDS, SandboxWorld, wait_until


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
    # The quick sweep (and a quick prefill, and fewer reads of /metrics) still finds the stand-in's knee; no test here
    # reads more of the sweep than its proposal.
    overrides: dict[str, Any] = {"traffic_sweep": QUICK_SWEEP, **({"database_url": database_url} if database_url else {})}
    sandbox = Sandbox(path, users_per_second=users_per_second, settings_overrides=overrides,
                      endpoint_overrides=endpoint, sweep_metrics_seconds=QUICK_SWEEP_METRICS_SECONDS).start()
    sandbox.stand_ins["openai"].configure(**QUICK_PREFILL)
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


def assert_settled(world: World, live_id: int) -> None:
    """``world`` as each test of a shared world starts: deployment ``live_id``'s manifest running, users let in,
    nothing in flight, no request left running at the model (an earlier test's released requests finish first)."""
    assert not [v.id for v in history(world.ctx, ENDPOINT) if v.in_flight], "a deployment is still in flight"
    assert world.route_admission() == "open"
    assert_runs_exactly(world, live_id)
    assert world.model.wait_for(lambda s: s.running == 0 and s.waiting == 0, timeout=WAIT_SECONDS)


def settle(world: World) -> None:
    """What a test of a shared world left in flight, ended: a deploy cancelled, it and the restore it starts driven
    to their end (the driving waits while an engine that test left running still holds the endpoint's lease)."""
    def none_in_flight() -> bool:
        flying = [v for v in history(world.ctx, ENDPOINT) if v.in_flight]
        for view in flying:
            if view.kind == "deploy":
                cancel(world.ctx, view.id, Identity(DEPLOYER))
            world.engine.advance(view.id)
        return not flying

    wait_until("no deployment in flight", none_in_flight, poll=1.0)

