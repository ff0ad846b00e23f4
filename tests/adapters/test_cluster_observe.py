"""``Cluster.observe``: what the cluster runs, read back from kmock's Kubernetes emulator over HTTP.

After an apply (followed to success by the operator simulator) the observation
is the rendered release, tuple hash, image and request limits on both paths; a
hand edit made with another field manager shows, and ``drift.compare`` names
it; an empty cluster is nothing; an API that does not answer is unknown
(``None``), quickly. The route's admission and its gateway's verdict come from
the HTTPRoute as the gateway stand-in wrote its status.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster import ContextClusters, KubernetesCluster
from bot.adapters.cluster.rest import object_path
from bot.config import EndpointSettings, RequestLimits
from bot.domain.admission import Admission
from bot.domain.drift import Observed, Recorded, compare
from bot.domain.release import ReleaseManifest
from bot.route_config import RouteSettings
from bot.sandbox.gateway import GatewayStandIn, ServiceKey
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.operator import OperatorSimulator
from bot.sandbox.traffic import (
    FALLBACK_SERVICE,
    GATEWAY_NAME,
    GATEWAY_NAMESPACE,
    route_config,
)
from tests.conftest import EXAMPLE_RELEASE, START

NS = "model-serving"
LIMITS = RequestLimits(max_concurrent_requests=6, max_queue_size=12, overflow_status_code=503)
OTHER_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-openai@sha256:" + "f" * 64


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace=NS, zone="us-east-1a")
        yield stand_in


@pytest.fixture()
def cluster(kube: KubeStandIn) -> KubernetesCluster:
    return KubernetesCluster(kube.api_client(), poll_seconds=0.02, clock=FrozenClock(START))


@pytest.fixture()
def release() -> ReleaseManifest:
    return ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text()))


@pytest.fixture()
def gateway(kube: KubeStandIn) -> Iterator[GatewayStandIn]:
    """The Gateway ``gateways/kimi-gateway``, synced by hand (``gateway.sync()``) so each test says when it reacts."""
    stand_in = GatewayStandIn(kube.rest(), name=GATEWAY_NAME, namespace=GATEWAY_NAMESPACE, backends={
        ServiceKey(NS, "kimi-prod", 8000): "http://127.0.0.1:9", ServiceKey(NS, FALLBACK_SERVICE, 8000): "http://127.0.0.1:9"})
    try:
        yield stand_in
    finally:
        stand_in.stop()


def endpoint(kind: str = "hyperpod", **overrides: Any) -> EndpointSettings:
    data: dict[str, Any] = {"name": f"kimi-{kind}", "kind": kind, "namespace": NS, "availability_zone": "us-east-1a",
                            "request_limits": LIMITS}
    data.update(overrides)
    return EndpointSettings(**data)


def routed(**route: Any) -> EndpointSettings:
    return endpoint("eks", name="kimi-prod", route=RouteSettings.model_validate({**route_config(), **route}))


def recorded(release: ReleaseManifest, ep: EndpointSettings, admission: str | None = None) -> Recorded:
    """What the database keeps after kimi-ops applied ``release`` on ``ep``."""
    return Recorded(release=release.name, release_hash=release.tuple_hash(), image=release.image,
                    limits=ep.effective_request_limits.model_dump(mode="json"), admission=admission)


def deploy(cluster: KubernetesCluster, kube: KubeStandIn, ep: EndpointSettings, release: ReleaseManifest) -> None:
    manifest = cluster.render(release, ep, release.tuple_hash())
    cluster.apply(ep, manifest)
    with OperatorSimulator(kube.rest(), NS, kind=ep.kind, step_seconds=0.02):
        assert cluster.watch(ep, manifest, timeout_seconds=30, on_progress=lambda _: None).status == "succeeded"


def workload_path(ep: EndpointSettings) -> str:
    return object_path("InferenceEndpointConfig" if ep.kind == "hyperpod" else "Deployment", ep.name, NS)


def edit_vllm_container(kube: KubeStandIn, ep: EndpointSettings, change: Any) -> None:
    """``kubectl edit`` of the Deployment's container: a merge patch replaces the one-container list."""
    live = kube.rest().get(workload_path(ep))
    assert live is not None
    containers = copy.deepcopy(live["spec"]["template"]["spec"]["containers"])
    change(containers[0])
    kube.rest().merge_patch(workload_path(ep), {"spec": {"template": {"spec": {"containers": containers}}}},
                            manager="kubectl-edit")


def unreachable_client() -> client.ApiClient:
    config = client.Configuration()
    config.host = "http://127.0.0.1:9"
    config.retries = 0
    return client.ApiClient(config)


# -- the workload ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_after_a_rollout_the_cluster_shows_the_rendered_release_image_and_limits(
        kind: str, kube: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint(kind)
    deploy(cluster, kube, ep, release)

    seen = cluster.observe(ep)
    assert seen is not None
    assert (seen.release, seen.release_hash, seen.image) == (release.name, release.tuple_hash(), release.image)
    assert seen.limits == {"max_concurrent_requests": 6, "max_queue_size": 12, "overflow_status_code": 503}
    assert seen.workload == ("InferenceEndpointConfig/kimi-hyperpod" if kind == "hyperpod" else "Deployment/kimi-eks")
    assert compare(recorded(release, ep), seen) == []


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_limits_accepted_from_the_traffic_gate_are_the_ones_observed(
        kind: str, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint(kind, accepted_request_limits=RequestLimits(max_concurrent_requests=9, max_queue_size=20,
                                                              overflow_status_code=429))
    cluster.apply(ep, cluster.render(release, ep, release.tuple_hash()))
    seen = cluster.observe(ep)
    assert seen is not None and seen.limits == {"max_concurrent_requests": 9, "max_queue_size": 20,
                                                "overflow_status_code": 429}


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_a_hand_edited_image_is_what_the_cluster_shows_and_is_reported_as_drift(
        kind: str, kube: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint(kind)
    deploy(cluster, kube, ep, release)
    if kind == "hyperpod":
        kube.rest().merge_patch(workload_path(ep), {"spec": {"worker": {"image": OTHER_IMAGE}}}, manager="kubectl-edit")
    else:
        edit_vllm_container(kube, ep, lambda c: c.update(image=OTHER_IMAGE))

    seen = cluster.observe(ep)
    assert seen is not None and seen.image == OTHER_IMAGE
    assert seen.release_hash == release.tuple_hash()  # the annotations still claim the release: only the image says
    assert [d.words for d in compare(recorded(release, ep), seen)] == [
        f"image: kimi-ops recorded {release.image}, the cluster has {OTHER_IMAGE}"]


def test_hand_edited_hyperpod_request_limits_are_reported_as_drift(
        kube: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint()
    deploy(cluster, kube, ep, release)
    kube.rest().merge_patch(workload_path(ep), {"spec": {"worker": {"requestLimits": {"maxConcurrentRequests": 32}}}},
                            manager="kubectl-edit")
    seen = cluster.observe(ep)
    assert seen is not None and seen.limits == {"max_concurrent_requests": 32, "max_queue_size": 12,
                                                "overflow_status_code": 503}
    [drift] = compare(recorded(release, ep), seen)
    assert drift.field == "request limits" and "max_concurrent_requests=32" in drift.observed


def test_on_eks_the_concurrency_vllm_runs_with_is_its_own_flag_and_the_queue_bound_the_annotation(
        kube: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint("eks")
    deploy(cluster, kube, ep, release)
    # Someone raises vLLM's concurrency by hand (a later flag wins in vLLM) and the queue bound with kubectl annotate.
    edit_vllm_container(kube, ep, lambda c: c.update(args=c["args"] + ["--max-num-seqs=64"]))
    kube.rest().merge_patch(workload_path(ep), {"metadata": {"annotations": {"kimi-ops.io/max-queue-size": "100"}}},
                            manager="kubectl-annotate")

    seen = cluster.observe(ep)
    assert seen is not None and seen.limits == {"max_concurrent_requests": 64, "max_queue_size": 100,
                                                "overflow_status_code": 503}
    [drift] = compare(recorded(release, ep), seen)
    assert drift.words == ("request limits: kimi-ops recorded max_concurrent_requests=6, max_queue_size=12, "
                           "overflow_status_code=503, the cluster has max_concurrent_requests=64, max_queue_size=100, "
                           "overflow_status_code=503")


def test_a_release_applied_behind_kimi_ops_back_shows_as_a_release_drift_by_name(
        cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint("eks")
    cluster.apply(ep, cluster.render(release, ep, release.tuple_hash()))
    data = release.model_dump(mode="json")
    data["name"] = "kimi-k3-2026-09-01"
    data["serving"]["env"]["VLLM_LOGGING_LEVEL"] = "INFO"
    newer = ReleaseManifest.model_validate(data)
    cluster.apply(ep, cluster.render(newer, ep, newer.tuple_hash()))

    seen = cluster.observe(ep)
    assert seen is not None and (seen.release, seen.release_hash) == (newer.name, newer.tuple_hash())
    assert [d.words for d in compare(recorded(release, ep), seen)] == [
        "release: kimi-ops recorded kimi-k3-2026-08-01, the cluster has kimi-k3-2026-09-01"]


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_an_endpoint_with_nothing_applied_runs_nothing(kind: str, cluster: KubernetesCluster,
                                                       release: ReleaseManifest) -> None:
    ep = endpoint(kind)
    assert cluster.observe(ep) == Observed(release=None, release_hash=None, image=None, limits=None, admission=None)
    seen = cluster.observe(routed())  # a route configured but never written is no admission either
    assert seen == Observed(release=None, release_hash=None, image=None, limits=None, admission=None)
    assert "release: kimi-ops recorded kimi-k3-2026-08-01, the cluster has nothing" in [
        d.words for d in compare(recorded(release, ep), cluster.observe(ep))]


# -- an API that does not answer -------------------------------------------------------------------------------


def test_an_unreachable_api_server_is_unknown_quickly_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kimi_ops.adapters.cluster.observe")
    with unreachable_client() as api:
        started = time.monotonic()
        seen = KubernetesCluster(api).observe(endpoint())
    assert seen is None and time.monotonic() - started < 5
    assert "could not observe endpoint kimi-hyperpod" in caplog.text
    assert [d.words for d in compare(recorded(ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text())),
                                              endpoint()), seen)] == [
        "cluster: kimi-ops recorded a release, the cluster has no answer (could not be read)"]


def test_an_emulator_that_stopped_after_the_apply_is_unknown_not_nothing(release: ReleaseManifest) -> None:
    kube = start_kube()
    stopped = False
    try:
        seed_cluster(kube.rest(), namespace=NS)
        api = kube.api_client()
        api.configuration.retries = 0
        cluster = KubernetesCluster(api, clock=FrozenClock(START))
        ep = endpoint("eks")
        cluster.apply(ep, cluster.render(release, ep, release.tuple_hash()))
        assert cluster.observe(ep) is not None
        kube.stop()
        stopped = True
        started = time.monotonic()
        assert cluster.observe(ep) is None
        assert time.monotonic() - started < 5
    finally:
        if not stopped:
            kube.stop()


def test_a_cluster_context_that_cannot_be_loaded_is_unknown_not_an_exception() -> None:
    def no_kubeconfig(context: str | None) -> Any:
        raise RuntimeError(f"context {context} not found in kubeconfig")

    assert ContextClusters(client_factory=no_kubeconfig).observe(endpoint(cluster_context="elsewhere")) is None


# -- the route -------------------------------------------------------------------------------------------------


def test_a_closed_route_is_observed_closed_and_accepted_once_the_gateway_says_so(
        cluster: KubernetesCluster, gateway: GatewayStandIn) -> None:
    ep = routed()
    cluster.set_route(ep, Admission.closed(), "rollback #7")
    before = cluster.observe(ep)
    assert before is not None and before.admission == "closed"
    assert before.route_accepted is None  # no gateway has reported on this generation yet: not yet known

    gateway.sync()
    seen = cluster.observe(ep)
    assert seen is not None and (seen.admission, seen.route_accepted) == ("closed", True)
    assert seen.route is not None and "gateways/kimi-gateway accepted" in seen.route
    assert compare(Recorded(None, None, None, None, "closed"), seen) == []

    cluster.set_route(ep, Admission.share(25), "ramp step 1")
    moved = cluster.observe(ep)
    assert moved is not None and (moved.admission, moved.route_accepted) == ("25%", None)  # the old verdict is stale
    gateway.sync()
    again = cluster.observe(ep)
    assert again is not None and (again.admission, again.route_accepted) == ("25%", True)


def test_a_route_the_gateway_refuses_is_reported_as_drift(cluster: KubernetesCluster, gateway: GatewayStandIn) -> None:
    ep = routed(gateway={"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE, "section_name": "https"})
    cluster.set_route(ep, Admission.internal(), "soak")
    gateway.sync()  # the stand-in has only an "http" listener
    seen = cluster.observe(ep)
    assert seen is not None and (seen.admission, seen.route_accepted) == ("internal", False)
    assert [d.words for d in compare(Recorded(None, None, None, None, "internal"), seen)] == [
        "route: kimi-ops recorded accepted by its gateway, the cluster has not accepted"]


def test_hand_edited_route_weights_are_the_admission_observed(kube: KubeStandIn, cluster: KubernetesCluster,
                                                              gateway: GatewayStandIn) -> None:
    ep = routed()
    written = cluster.set_route(ep, Admission.closed(), "drain")
    live = kube.rest().get(object_path("HTTPRoute", ep.name, NS))
    assert live is not None and written.effective == Admission.closed()
    rules = copy.deepcopy(live["spec"]["rules"])
    for rule in rules:  # someone opens the route by hand
        for ref in rule["backendRefs"]:
            ref["weight"] = 100 if ref["name"] == ep.name else 0
    kube.rest().merge_patch(object_path("HTTPRoute", ep.name, NS), {"spec": {"rules": rules}}, manager="kubectl-edit")
    gateway.sync()

    seen = cluster.observe(ep)
    assert seen is not None and (seen.admission, seen.route_accepted) == ("open", True)
    assert seen.route is not None and "annotation says closed" in seen.route
    assert [d.words for d in compare(Recorded(None, None, None, None, "closed"), seen)] == [
        "admission: kimi-ops recorded closed, the cluster has open"]


def test_without_a_route_the_admission_configmap_is_the_admission_observed(
        cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint()
    cluster.apply(ep, cluster.render(release, ep, release.tuple_hash()))
    cluster.set_admission(ep, False, "rollback #7")
    seen = cluster.observe(ep)
    assert seen is not None and (seen.admission, seen.route_accepted, seen.route) == ("closed", None, None)
    cluster.set_admission(ep, True, "reopened")
    assert cluster.observe(ep) == Observed(release.name, release.tuple_hash(), release.image,
                                           {"max_concurrent_requests": 6, "max_queue_size": 12, "overflow_status_code": 503},
                                           "open", workload="InferenceEndpointConfig/kimi-hyperpod")
