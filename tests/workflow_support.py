"""Test doubles of the service ports for workflow-rule tests, plus settings shared by those tests.

These stand in for adapters only where a test is about the workflow's rules (who may
approve, what is stale, what is locked); the adapters themselves are tested against
their real stand-ins (moto, kmock, the local OpenAI-compatible server), and the
end-to-end workflow test uses those. ``wf``, :func:`approve` and :func:`deploy_to_live` drive a deployment through
its gates for ``tests/services/test_workflow*.py``.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import threading
from dataclasses import dataclass, field

import pytest
import yaml

from bot.config import EndpointSettings
from bot.domain.checks import Check
from bot.domain.coldstart import ColdStart
from bot.domain.doors import DoorPath
from bot.domain.governance import ArtifactPolicy
from bot.domain.readiness import MetricsSnapshot, ReadinessResult
from bot.domain.release import ReleaseManifest
from bot.domain.reservations import ReservationInfo
from bot.domain.rollout import (
    ApplyResult,
    RenderedManifest,
    RolloutOutcome,
    RolloutProgress,
)
from bot.sandbox.aws import INFERENCE_ROLE
from bot.sandbox.stack import SANDBOX_DOOR, SANDBOX_EGRESS
from bot.services.access import Identity
from bot.services.context import Ports
from bot.services.deployments import decide_gate, get_deployment, request_deploy
from tests.conftest import EXAMPLE_RELEASE, START

REQUESTER = Identity("U0DEPLOYER")
APPROVER_1 = Identity("U0APPROVER1")
APPROVER_2 = Identity("U0APPROVER2")
ADMIN = Identity("U0ADMIN")
STRANGER = Identity("U0STRANGER")

ROLES = {
    "deployer": ["U0DEPLOYER"],
    "approver": ["U0APPROVER1", "S0APPROVERS"],
    "admin": ["U0ADMIN"],
    "viewer": [],
}


def endpoint_config(name: str = "kimi-prod", **overrides: object) -> dict:
    data = {
        "name": name, "kind": "hyperpod", "environment": "prod", "namespace": "model-serving",
        "url": "http://127.0.0.1:9", "availability_zone": "us-east-1a",
        "reservation_id": "arn:aws:sagemaker:us-east-1:123456789012:training-plan/kimi",
        "inference_roles": [INFERENCE_ROLE], "egress": SANDBOX_EGRESS,
        # The door: an application layer that enforces admission (FakeCluster acknowledges every change at once).
        "door": SANDBOX_DOOR,
    }
    data.update(overrides)
    return data


@functools.cache
def _example_release() -> dict:
    return yaml.safe_load(EXAMPLE_RELEASE.read_text())  # parsed once a worker: 2 ms each, a few thousand calls


def release_data(name: str, **serving_env: str) -> dict:
    data = copy.deepcopy(_example_release())
    data["name"] = name
    data["serving"]["env"].update(serving_env)
    return data


@dataclass
class FakeVerifier:
    extra: list[Check] = field(default_factory=list)
    calls: int = 0

    def verify(self, release: ReleaseManifest, policy: ArtifactPolicy | None = None) -> list[Check]:
        self.calls += 1
        return [Check.passed("image.pinned", "pinned"), *self.extra]

    def verify_weights(self, release: ReleaseManifest) -> list[Check]:
        self.calls += 1
        return [Check.passed("weights.objects", "all objects match"), *self.extra]


@dataclass
class FakeReservations:
    end: dt.datetime = START + dt.timedelta(days=20)

    def capacity_blocks(self, region: str, instance_type: str) -> list[ReservationInfo]:
        return []

    def training_plans(self, region: str) -> list[ReservationInfo]:
        return [ReservationInfo(
            id="arn:aws:sagemaker:us-east-1:123456789012:training-plan/kimi", kind="training-plan", region=region,
            instance_type="ml.p6-b300.48xlarge", availability_zone="us-east-1a", instance_count=1,
            start=START - dt.timedelta(days=1), end=self.end, state="Active",
        )]


@dataclass
class FakeCluster:
    outcome: str = "succeeded"
    applied: list[str] = field(default_factory=list)
    admission: list[bool] = field(default_factory=list)
    block: threading.Event | None = None
    # Rollouts of manifests containing any of these strings fail (a bad candidate; the restored release still rolls out).
    failing: set[str] = field(default_factory=set)
    watched_since: list[dt.datetime | None] = field(default_factory=list)  # each watch's `since` (its deployment's apply)


    def cold_start(self, endpoint: EndpointSettings, first_completion_s: float | None) -> ColdStart | None:
        """What the rollout's pod said about its start: 90 s pull, 800 s weights, 300 s load."""
        return ColdStart(90.0, 800.0, 300.0, first_completion_s)

    def render(self, release: ReleaseManifest, endpoint: EndpointSettings, release_hash: str) -> RenderedManifest:
        return RenderedManifest.of([{
            "apiVersion": "inference.sagemaker.aws.amazon.com/v1", "kind": "InferenceEndpointConfig",
            "metadata": {"name": endpoint.name, "namespace": endpoint.namespace,
                         "annotations": {"kimi-ops.io/tuple-hash": release_hash}},
            "spec": {"worker": {"image": release.image, "args": list(release.serving.args)}},
        }])

    def preflight(self, endpoint: EndpointSettings) -> list[Check]:
        return [Check.passed("gpu_nodes", "1 node with 8 GPUs", zones=["us-east-1a"])]

    def doors(self, endpoint: EndpointSettings, manifest: RenderedManifest) -> list[DoorPath]:
        """The declared door only: a cluster without side doors."""
        if endpoint.route is not None:
            return [DoorPath("route", f"HTTPRoute {endpoint.name}", "through the gateway", door=True)]
        if endpoint.door.application_layer is not None:
            return [DoorPath("application layer", "", endpoint.door.application_layer.describe(), door=True)]
        return []

    def apply(self, endpoint: EndpointSettings, manifest: RenderedManifest, force: bool = False) -> ApplyResult:
        changed = not self.applied or self.applied[-1] != manifest.text
        self.applied.append(manifest.text)
        return ApplyResult(manifest=manifest, changed=changed)

    def watch(self, endpoint, manifest, *, timeout_seconds, on_progress, stop=None, since=None) -> RolloutOutcome:
        self.watched_since.append(since)
        on_progress(RolloutProgress("DeploymentInProgress", state="DeploymentInProgress"))
        if self.block is not None:
            self.block.wait(timeout=30)
        if self.outcome == "succeeded" and not any(marker in manifest.text for marker in self.failing):
            on_progress(RolloutProgress("DeploymentComplete", state="DeploymentComplete"))
            return RolloutOutcome("succeeded", "DeploymentComplete", 1.0)
        return RolloutOutcome("failed", "DeploymentFailed: image pull backoff", 1.0)  # type: ignore[arg-type]

    def set_admission(self, endpoint: EndpointSettings, open_: bool, reason: str) -> int:
        self.admission.append(open_)
        return len(self.admission)

    def admission_enforced(self, endpoint: EndpointSettings) -> int | None:
        """An application layer that takes every change at once."""
        return len(self.admission) or None


@dataclass
class FakeEndpoint:
    ok: bool = True
    drained: bool = True
    error: str = "HTTP 500: engine dead"  # what a failing readiness says (the endpoint's words)

    def readiness(self, endpoint: EndpointSettings) -> ReadinessResult:
        if self.ok:
            return ReadinessResult(ok=True, http_status=200, ttft_ms=120.0, total_ms=900.0)
        return ReadinessResult(ok=False, http_status=500, failure_kind="http_status", error=self.error)

    def metrics(self, endpoint: EndpointSettings) -> MetricsSnapshot:
        return MetricsSnapshot(0, 0, 0.1, 0.5, 0.1, 0.3)

    def drain(self, endpoint: EndpointSettings, timeout_seconds: float, stop: object = None):
        if self.drained:
            return True, self.metrics(endpoint)
        return False, MetricsSnapshot(2, 1, 0.4, 0.5, 0.1, 0.3)


def fake_ports(**overrides: object) -> Ports:
    """The workflow's ports answered by the in-memory fakes above; ``overrides`` (by port name) replace some."""
    fakes: dict[str, object] = {
        "artifacts": FakeVerifier(), "cluster": FakeCluster(), "endpoint": FakeEndpoint(), "reservations": FakeReservations(),
    }
    return Ports(**{**fakes, **overrides})  # type: ignore[arg-type]


def sweep_ports(metrics_seconds: float | None = None) -> Ports:
    """A real endpoint client and a sweep reading /metrics through it, as production wires them (bot/bootstrap.py):
    one client, closed with the context. ``metrics_seconds``: how often the sweep reads (the adapter's own default)."""
    from bot.adapters.endpoint import HttpEndpointClient
    from bot.adapters.endpoint.loadgen import HttpLoadGenerator

    client = HttpEndpointClient(timeout=5)
    every = {} if metrics_seconds is None else {"metrics_interval": metrics_seconds}
    return Ports(loadgen=HttpLoadGenerator(metrics=client.peak_metrics, **every), endpoint=client)


def workflow(make_ctx, releases: int = 2) -> tuple[object, object]:
    """A context on the fakes with ``kimi-prod`` declared, releases rel-a, rel-b… registered, and an engine."""
    from bot.services.engine import Engine
    from bot.services.releases import register_release

    ctx = make_ctx(endpoints=[endpoint_config()], roles=ROLES, ports=fake_ports())
    for i in range(releases):
        extra = {"EXTRA": str(i)} if i else {}
        register_release(ctx, release_data(f"rel-{'abcdefgh'[i]}", **extra), "U0DEPLOYER")
    return ctx, Engine(ctx, readiness_pause=0)


@pytest.fixture()
def wf(make_ctx):
    """A workflow of three releases on a fake cluster: (context, engine)."""
    return workflow(make_ctx, releases=3)


def approve(ctx, engine, dep_id, who=APPROVER_1):
    view = get_deployment(ctx, dep_id)
    assert view.pending is not None, view
    decide_gate(ctx, dep_id, view.pending.gate, "approved", who,
                seen_report_hash=view.pending.report_hash, seen_release_hash=view.pending.release_hash)
    return engine.advance(dep_id)


def deploy_to_live(ctx, engine, release="rel-a"):
    view = request_deploy(ctx, release, "kimi-prod", REQUESTER)
    view = engine.advance(view.id)
    gates_seen = []
    while view.state != "live":
        assert view.pending is not None, view
        gates_seen.append(view.pending.gate)
        view = approve(ctx, engine, view.id, APPROVER_1 if len(gates_seen) % 2 else ADMIN)
    assert gates_seen == ["artifact", "infrastructure", "model", "traffic"]
    return view
