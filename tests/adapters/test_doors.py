"""One door to the model: what kimi-ops renders, and every side door planted in kmock's emulator, caught.

The rendered HyperPod endpoint creates no SageMaker endpoint and no load balancer
unless declared; the ingress NetworkPolicy on the model pods admits the Gateway's
data plane, kimi-ops and the metrics scraper only. ``Cluster.doors`` plus
``door_check`` is the infrastructure gate's ``cluster.doors``: on prod, any way to
the model pods besides the route fails it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster import KubernetesCluster, render_manifest
from bot.adapters.cluster.doors import find_doors
from bot.adapters.cluster.rest import Rest, collection_path
from bot.config import EndpointSettings
from bot.domain.checks import Check
from bot.domain.doors import door_check
from bot.domain.governance import SecurityException
from bot.domain.release import ReleaseManifest
from bot.domain.rollout import RenderedManifest
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from tests.conftest import EXAMPLE_RELEASE, START

NS = "model-serving"
ROUTE = {"gateway": {"name": "kimi-gateway", "namespace": "gateways"}}


@pytest.fixture(scope="module")
def release() -> ReleaseManifest:
    return ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text()))


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace=NS, zone="us-east-1a")
        yield stand_in


@pytest.fixture()
def cluster(kube: KubeStandIn) -> KubernetesCluster:
    return KubernetesCluster(kube.api_client(), poll_seconds=0.02, clock=FrozenClock(START))


def endpoint(kind: str = "hyperpod", **overrides: Any) -> EndpointSettings:
    data: dict[str, Any] = {"name": "kimi-prod", "kind": kind, "namespace": NS, "route": ROUTE,
                            "availability_zone": "us-east-1a"}
    data.update(overrides)
    return EndpointSettings(**data)


def by_name(manifest: RenderedManifest) -> dict[str, dict[str, Any]]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in manifest.objects}


def gate(cluster: KubernetesCluster, ep: EndpointSettings, release: ReleaseManifest,
         exception: SecurityException | None = None) -> Check:
    manifest = cluster.render(release, ep, release.tuple_hash())
    return door_check(cluster.doors(ep, manifest), environment=ep.environment,
                      exception=(exception, None if exception else "no side-door exception is recorded"))


def plant(rest: Rest, kind: str, obj: dict[str, Any]) -> None:
    rest.create(collection_path(kind, NS), {"metadata": {"namespace": NS, **obj.pop("metadata")}, **obj})


def model_service(rest: Rest, name: str, type_: str = "ClusterIP") -> None:
    plant(rest, "Service", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                            "spec": {"type": type_, "selector": {"app": "kimi-prod"},
                                     "ports": [{"port": 8000, "targetPort": 8000}]}})


# -- what is rendered ----------------------------------------------------------------------------------------


def test_hyperpod_renders_no_sagemaker_endpoint_and_no_load_balancer_unless_declared(release: ReleaseManifest) -> None:
    iec = by_name(render_manifest(release, endpoint(), release.tuple_hash()))["InferenceEndpointConfig/kimi-prod"]
    assert iec["spec"]["endpointName"] == "" and "loadBalancer" not in iec["spec"]
    declared = endpoint(door={"sagemaker_endpoint": "kimi-k3-prod",
                              "load_balancer": {"source_cidrs": ["10.0.32.0/24"]}})
    objects = by_name(render_manifest(release, declared, release.tuple_hash()))
    spec = objects["InferenceEndpointConfig/kimi-prod"]["spec"]
    assert spec["endpointName"] == "kimi-k3-prod" and spec["loadBalancer"] == {"healthCheckPath": "/health"}
    # The declared ALB's subnets reach the serving port, and nothing else is added.
    ingress = objects["NetworkPolicy/kimi-prod-ingress"]["spec"]["ingress"]
    assert ingress[-1] == {"from": [{"ipBlock": {"cidr": "10.0.32.0/24"}}], "ports": [{"protocol": "TCP", "port": 8000}]}


def test_a_sagemaker_endpoint_needs_its_load_balancer_declared() -> None:
    with pytest.raises(ValueError, match=r"declare door.load_balancer"):
        endpoint(door={"sagemaker_endpoint": "kimi-k3-prod"})


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_the_ingress_policy_admits_the_gateway_data_plane_kimi_ops_and_the_scraper_only(
        release: ReleaseManifest, kind: str) -> None:
    ep = endpoint(kind, route={"gateway": {"name": "eg", "namespace": "gateways", "data_plane": {
        "namespace": "envoy-gateway-system", "pod_labels": {"gateway.envoyproxy.io/owning-gateway-name": "eg"}}}})
    objects = by_name(render_manifest(release, ep, release.tuple_hash()))  # validated on Kubernetes' own schema
    policy = objects["NetworkPolicy/kimi-prod-ingress" if kind == "hyperpod" else "NetworkPolicy/kimi-prod"]
    assert "Ingress" in policy["spec"]["policyTypes"]

    def peer(namespace: str, labels: dict[str, str]) -> dict[str, Any]:
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "podSelector": {"matchLabels": labels}}

    assert policy["spec"]["ingress"] == [
        {"from": [peer("envoy-gateway-system", {"gateway.envoyproxy.io/owning-gateway-name": "eg"})],
         "ports": [{"protocol": "TCP", "port": 8000}]},
        {"from": [peer("kimi-ops", {"app.kubernetes.io/name": "kimi-ops"})], "ports": [{"protocol": "TCP", "port": 8000}]},
        {"from": [peer("monitoring", {"app.kubernetes.io/name": "prometheus"})],
         "ports": [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 9400}]},
    ]


def test_the_data_plane_defaults_to_the_gateway_api_label_in_the_gateways_namespace(release: ReleaseManifest) -> None:
    objects = by_name(render_manifest(release, endpoint(), release.tuple_hash()))
    first = objects["NetworkPolicy/kimi-prod-ingress"]["spec"]["ingress"][0]["from"][0]
    assert first == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateways"}},
                     "podSelector": {"matchLabels": {"gateway.networking.k8s.io/gateway-name": "kimi-gateway"}}}


# -- the side doors, planted ---------------------------------------------------------------------------------


def test_a_clean_cluster_has_one_door_the_route(cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    check = gate(cluster, endpoint(), release)
    assert check.status == "pass", check.reason
    assert check.reason == ("the only way to the model pods is route HTTPRoute model-serving/kimi-prod: through Gateway "
                            "gateways/kimi-gateway (pods gateway.networking.k8s.io/gateway-name=kimi-gateway in gateways)")


@pytest.mark.parametrize("service_type", ["LoadBalancer", "NodePort"])
def test_a_service_exposing_the_model_pods_fails_prod(kube: KubeStandIn, cluster: KubernetesCluster,
                                                      release: ReleaseManifest, service_type: str) -> None:
    model_service(kube.rest(), "kimi-public", service_type)
    check = gate(cluster, endpoint(), release)
    assert check.status == "fail"
    assert f"{service_type} Service kimi-public: exposes the model pods outside the cluster" in check.reason
    # Off prod the same door is a warning that names it.
    assert gate(cluster, endpoint(environment="staging"), release).status == "warn"


def test_an_ingress_or_another_route_to_the_model_service_fails_prod(kube: KubeStandIn, cluster: KubernetesCluster,
                                                                     release: ReleaseManifest) -> None:
    rest = kube.rest()
    model_service(rest, "kimi-internal")  # ClusterIP: no door by itself
    assert gate(cluster, endpoint(), release).status == "pass"
    plant(rest, "Ingress", {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "kimi-alb"},
                            "spec": {"rules": [{"host": "kimi.example.com", "http": {"paths": [{
                                "path": "/v1", "pathType": "Prefix",
                                "backend": {"service": {"name": "kimi-internal", "port": {"number": 8000}}}}]}}]}})
    plant(rest, "HTTPRoute", {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                              "metadata": {"name": "shortcut"},
                              "spec": {"parentRefs": [{"name": "other"}],
                                       "rules": [{"backendRefs": [{"name": "kimi-internal", "port": 8000}]}]}})
    check = gate(cluster, endpoint(), release)
    assert check.status == "fail"
    assert "Ingress kimi-alb: kimi.example.com/v1 → Service kimi-internal" in check.reason
    assert ("HTTPRoute model-serving/shortcut: sends requests to Service kimi-internal outside kimi-ops's admission"
            in check.reason)


def test_a_sagemaker_endpoint_the_running_object_registers_fails_prod(kube: KubeStandIn, cluster: KubernetesCluster,
                                                                       release: ReleaseManifest) -> None:
    rest = kube.rest()
    plant(rest, "InferenceEndpointConfig", {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1", "kind": "InferenceEndpointConfig",
        "metadata": {"name": "kimi-prod"}, "spec": {"endpointName": "kimi-prod"},
        "status": {"endpoints": {"sagemaker": {"state": "CreationCompleted"}}}})
    check = gate(cluster, endpoint(), release)
    assert check.status == "fail"
    assert "SageMaker endpoint kimi-prod: the running InferenceEndpointConfig registers it" in check.reason


def test_a_declared_sagemaker_endpoint_needs_a_side_door_exception_on_prod(cluster: KubernetesCluster,
                                                                           release: ReleaseManifest) -> None:
    ep = endpoint(door={"sagemaker_endpoint": "kimi-k3-prod", "load_balancer": {"source_cidrs": ["10.0.32.0/24"]}})
    refused = gate(cluster, ep, release)
    assert refused.status == "fail" and "needs a side-door security exception" in refused.reason
    granted = SecurityException(id="SEC-7", kind="side-door", scope="endpoint", target="kimi-prod", reviewer="U0SEC",
                                reason="partner API", expires_at=START + dt.timedelta(days=30), recorded_at=START)
    allowed = gate(cluster, ep, release, granted)
    assert allowed.status == "pass" and "allowed by security exception SEC-7" in allowed.reason


@pytest.mark.parametrize("rule", [
    {},  # every source
    {"from": [{"namespaceSelector": {}}]},  # every namespace
    {"from": [{"podSelector": {}}]},  # every pod of the namespace
    {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]},
    {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kimi-ops"}}}]},  # all of kimi-ops's
])
def test_a_too_wide_ingress_policy_beside_ours_fails_prod(kube: KubeStandIn, cluster: KubernetesCluster,
                                                           release: ReleaseManifest, rule: dict[str, Any]) -> None:
    # NetworkPolicies add up: one more that admits anyone widens the door, whatever ours says.
    plant(kube.rest(), "NetworkPolicy", {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "allow-debug"},
        "spec": {"podSelector": {"matchLabels": {"app": "kimi-prod"}}, "policyTypes": ["Ingress"], "ingress": [rule]}})
    check = gate(cluster, endpoint(), release)
    assert check.status == "fail" and "NetworkPolicy allow-debug: rule 1 admits" in check.reason


def test_a_policy_for_other_pods_or_egress_only_is_no_door(kube: KubeStandIn, cluster: KubernetesCluster,
                                                          release: ReleaseManifest) -> None:
    for name, selector, types in (("web", {"app": "web"}, ["Ingress"]), ("out", {"app": "kimi-prod"}, ["Egress"])):
        plant(kube.rest(), "NetworkPolicy", {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name},
            "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": types, "ingress": [{}]}})
    assert gate(cluster, endpoint(), release).status == "pass"


def test_without_any_ingress_policy_every_pod_reaches_the_model(kube: KubeStandIn, release: ReleaseManifest) -> None:
    ep = endpoint()
    manifest = render_manifest(release, ep, release.tuple_hash())
    without_policies = [o for o in manifest.objects if o["kind"] != "NetworkPolicy"]
    paths = find_doors(kube.rest(), ep, without_policies)
    check = door_check(paths, environment="prod", exception=(None, "none"))
    assert check.status == "fail" and "no NetworkPolicy limits who reaches the model pods" in check.reason


def test_an_endpoint_without_route_or_application_layer_keeps_nobody_off(cluster: KubernetesCluster,
                                                                         release: ReleaseManifest) -> None:
    check = gate(cluster, endpoint(route=None, environment="staging"), release)
    assert check.status == "warn"
    assert "no route and no application layer keeps users off" in check.reason
    assert "every pod in model-serving" in check.reason  # the namespace-wide rule rendered in its place
