"""The cluster adapter waits on the cluster with the Kubernetes watch API, not on a fixed period.

A rollout's verdict and a gateway's verdict on a route change are seen as the API server streams them: each test
sets the resync period (``poll_seconds``, the longest wait between reads) far beyond the test's own wait, so only a
watch can end it. Everything runs over HTTP against kmock's Kubernetes emulator, with the HyperPod/EKS operator
simulator and the gateway stand-in writing the statuses as the real controllers do.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster import KubernetesCluster
from bot.adapters.cluster.watching import wait_for_change
from bot.config import EndpointSettings
from bot.domain.admission import Admission
from bot.domain.release import ReleaseManifest
from bot.domain.rollout import RolloutOutcome, RolloutProgress
from bot.route_config import RouteSettings
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.operator import OperatorSimulator
from bot.sandbox.traffic import route_config, start_traffic_layer
from tests.conftest import EXAMPLE_RELEASE, START
from tests.world_support import in_background, wait_until

NS = "model-serving"
NEVER = 3600.0  # a resync period no test waits out: only the watch can wake the adapter


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace=NS, zone="us-east-1a")
        yield stand_in


def endpoint(kind: str) -> EndpointSettings:
    return EndpointSettings(name=f"kimi-{kind}", kind=kind, namespace=NS, availability_zone="us-east-1a")


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_a_rollouts_verdict_is_seen_when_the_operator_writes_it_not_at_the_next_read(kube: KubeStandIn, kind: str) -> None:
    cluster = KubernetesCluster(kube.api_client(), poll_seconds=NEVER, clock=FrozenClock(START))
    release = ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text()))
    ep = endpoint(kind)
    manifest = cluster.render(release, ep, release.tuple_hash())
    cluster.apply(ep, manifest)
    progress: list[RolloutProgress] = []
    stop = threading.Event()
    with OperatorSimulator(kube.rest(), NS, kind=kind, step_seconds=0.02):  # type: ignore[arg-type]
        thread, result = in_background(lambda: cluster.watch(ep, manifest, timeout_seconds=NEVER,
                                                             on_progress=progress.append, stop=stop))
        try:
            wait_until("the rollout's verdict", lambda: result)
        finally:
            stop.set()
            thread.join(30)
    outcome = result[0]
    assert isinstance(outcome, RolloutOutcome) and outcome.status == "succeeded", outcome
    assert len({p.state for p in progress}) > 1  # every state the operator wrote on the way was seen


def test_a_stop_ends_a_watch_that_is_waiting_for_a_change(kube: KubeStandIn) -> None:
    kube.rest().apply({"apiVersion": "inference.sagemaker.aws.amazon.com/v1", "kind": "InferenceEndpointConfig",
                       "metadata": {"name": "kimi-hyperpod", "namespace": NS}, "spec": {}}, manager="test", force=True)
    stop = threading.Event()
    api = kube.api_client()
    thread, result = in_background(lambda: wait_for_change(api, "InferenceEndpointConfig", "kimi-hyperpod", NS, None,
                                                           seconds=NEVER, stop=stop))
    # Nothing changes: the watch waits (its first version, the current one, is news to a caller that saw none).
    wait_until("the first version", lambda: result)
    assert result == [True]
    seen = kube.rest().get("/apis/inference.sagemaker.aws.amazon.com/v1/namespaces/model-serving/"
                           "inferenceendpointconfigs/kimi-hyperpod")
    assert seen is not None
    thread, result = in_background(lambda: wait_for_change(
        api, "InferenceEndpointConfig", "kimi-hyperpod", NS, seen["metadata"]["resourceVersion"], seconds=NEVER, stop=stop))
    stop.set()
    thread.join(30)
    assert not thread.is_alive() and result == [False]


def test_a_route_change_is_confirmed_when_the_gateway_accepts_it(kube: KubeStandIn) -> None:
    with OpenAIServer(served_model="Kimi-K3") as model:
        changed = kube.changes()
        traffic = start_traffic_layer(kube.rest(), namespace=NS, endpoint="kimi-prod", model_url=model.url, seed=13,
                                      changed=changed)
        try:
            ep = EndpointSettings(name="kimi-prod", namespace=NS, url=model.url,
                                  route=RouteSettings.model_validate(route_config()))
            cluster = KubernetesCluster(kube.api_client(), clock=FrozenClock(START))
            written = cluster.set_route(ep, Admission.internal(), "test: internal")
            status: Any = written
            # Each call returns as soon as the route's copy in the cluster changes (at most the gateway's writes).
            for _ in range(10):
                if status.accepted and status.generation == written.generation:
                    break
                status = cluster.next_route_status(ep, status, NEVER)
            assert status.accepted and status.effective == Admission.internal(), status
        finally:
            traffic.stop()
