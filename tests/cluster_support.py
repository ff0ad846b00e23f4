"""What the cluster adapter's tests share (``tests/adapters/test_cluster_{preflight,apply,rollout}.py``): kmock's
Kubernetes emulator per test (``kube``; ``seeded`` with a HyperPod-ready cluster), the adapter over it (``cluster``),
the example release, an endpoint of either kind, and a recorder of a rollout's progress.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster import KubernetesCluster
from bot.config import EndpointSettings
from bot.domain.release import ReleaseManifest
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from tests.conftest import EXAMPLE_RELEASE, START

NS = "model-serving"


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        yield stand_in


@pytest.fixture()
def seeded(kube: KubeStandIn) -> KubeStandIn:
    seed_cluster(kube.rest(), namespace=NS, zone="us-east-1a")
    return kube


@pytest.fixture()
def cluster(seeded: KubeStandIn) -> KubernetesCluster:
    return KubernetesCluster(seeded.api_client(), poll_seconds=0.02, clock=FrozenClock(START))


@pytest.fixture()
def release() -> ReleaseManifest:
    return ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text()))


def endpoint(kind: str = "hyperpod", **overrides: Any) -> EndpointSettings:
    data: dict[str, Any] = {"name": f"kimi-{kind}", "kind": kind, "namespace": NS, "availability_zone": "us-east-1a"}
    data.update(overrides)
    return EndpointSettings(**data)


def other_release(release: ReleaseManifest) -> ReleaseManifest:
    data = release.model_dump(mode="json")
    data["name"] = "kimi-k3-2026-09-01"
    data["serving"]["env"]["VLLM_LOGGING_LEVEL"] = "INFO"
    return ReleaseManifest.model_validate(data)
