"""One door, through the Gateway API: other routes to the model backends, planted in kmock's emulator, caught.

Besides kimi-ops's own HTTPRoute, a GRPCRoute, TCPRoute or TLSRoute (v1, or v1alpha2
on an older experimental install) in the model's namespace, or such a route in
another namespace that a ReferenceGrant in the model's namespace lets refer to
the model Service or InferencePool, reaches Kimi K3 outside
kimi-ops's admission: on prod ``cluster.doors`` fails and names it (kind,
namespace, name) and the fix. So does such a grant before any route uses it. A
cross-namespace route without a grant, or with a grant that does not cover a model
backend, is refused by the gateway, so it is no door; nor is a grant from the
model's own namespace, where kimi-ops's route lives and needs none. Every object
planted is first validated against the Gateway API's own CRDs (v1.6.1,
``tests/fixtures/gateway-api/other-kinds/``) and the Inference Extension's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster import KubernetesCluster
from bot.adapters.cluster.rest import Rest, collection_path
from bot.adapters.cluster.route import route_errors
from bot.adapters.cluster.validate import crd_validator, object_errors, schema_errors
from bot.config import EndpointSettings
from bot.domain.checks import Check
from bot.domain.doors import door_check
from bot.domain.release import ReleaseManifest
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from tests.conftest import EXAMPLE_RELEASE, START

NS = "model-serving"
APPS = "apps"
GATEWAY = "gateway.networking.k8s.io"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "gateway-api" / "other-kinds"


@functools.cache
def _crd_validator(plural: str, version: str) -> Any:
    document = yaml.safe_load((FIXTURES / f"{plural}.crd.yaml").read_text())
    served = next(v for v in document["spec"]["versions"] if v["name"] == version)
    return crd_validator({"openAPIV3Schema": served["schema"]["openAPIV3Schema"]})


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """The object checked against the real CRD of its kind and served version."""
    version = obj["apiVersion"].rsplit("/", 1)[1]
    if obj["kind"] == "HTTPRoute":
        return route_errors(obj)
    if obj["kind"] == "InferencePool":
        return object_errors(obj)
    plural = {"GRPCRoute": "grpcroutes", "ReferenceGrant": "referencegrants", "TCPRoute": "tcproutes",
              "TLSRoute": "tlsroutes"}[obj["kind"]]
    return schema_errors(_crd_validator(plural, version), obj)


def plant(rest: Rest, namespace: str, obj: dict[str, Any]) -> None:
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    assert crd_errors(obj) == [], crd_errors(obj)
    rest.create(collection_path(obj["kind"], namespace), obj)


def route(kind: str, name: str, backend: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    hostnames = {"hostnames": ["kimi.example.com"]} if kind == "TLSRoute" else {}  # TLS passthrough picks by SNI
    return {"apiVersion": f"{GATEWAY}/{version}", "kind": kind, "metadata": {"name": name},
            "spec": {"parentRefs": [{"name": "apps-gateway", "namespace": "gateways"}], **hostnames,
                     "rules": [{"backendRefs": [{**backend, "port": 8000}]}]}}


def grant(name: str, *, source_kind: str = "HTTPRoute", source_ns: str = APPS,
          to: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": f"{GATEWAY}/v1beta1", "kind": "ReferenceGrant", "metadata": {"name": name},
            "spec": {"from": [{"group": GATEWAY, "kind": source_kind, "namespace": source_ns}],
                     "to": [to or {"group": "", "kind": "Service"}]}}


@pytest.fixture(scope="module")
def release() -> ReleaseManifest:
    return ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text()))


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace=NS, zone="us-east-1a")
        rest = stand_in.rest()
        rest.create(collection_path("Service", NS), {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "kimi-internal", "namespace": NS},
            "spec": {"selector": {"app": "kimi-prod"}, "ports": [{"port": 8000, "targetPort": 8000}]}})
        yield stand_in


def gate(kube: KubeStandIn, release: ReleaseManifest, environment: str = "prod") -> Check:
    ep = EndpointSettings(name="kimi-prod", kind="hyperpod", namespace=NS, availability_zone="us-east-1a",
                          environment=environment, route={"gateway": {"name": "kimi-gateway", "namespace": "gateways"}})
    cluster = KubernetesCluster(kube.api_client(), poll_seconds=0.02, clock=FrozenClock(START))
    manifest = cluster.render(release, ep, release.tuple_hash())
    return door_check(cluster.doors(ep, manifest), environment=environment,
                      exception=(None, "no side-door exception is recorded"))


def test_the_upstream_examples_pass_the_crds_so_a_pass_means_something() -> None:
    for name in ("reference-grant_allow-prod-traffic.yaml", "basic-grpc.yaml"):
        for doc in yaml.safe_load_all((FIXTURES / name).read_text()):
            if doc["kind"] in ("GRPCRoute", "ReferenceGrant"):
                assert crd_errors(doc) == []
    broken = grant("g", to={"group": "", "kind": "Service", "colour": "blue"})
    assert any("Additional properties are not allowed ('colour'" in e for e in crd_errors(broken))


def test_a_grpc_route_to_the_model_service_fails_prod(kube: KubeStandIn, release: ReleaseManifest) -> None:
    assert gate(kube, release).status == "pass"
    plant(kube.rest(), NS, route("GRPCRoute", "grpc-shortcut", {"name": "kimi-internal"}))
    check = gate(kube, release)
    assert check.status == "fail"
    assert ("GRPCRoute model-serving/grpc-shortcut: sends requests to Service kimi-internal outside kimi-ops's "
            "admission; delete it") in check.reason


def test_a_route_from_another_namespace_is_a_door_only_once_a_reference_grant_lets_it_in(
        kube: KubeStandIn, release: ReleaseManifest) -> None:
    rest = kube.rest()
    plant(rest, APPS, route("HTTPRoute", "kimi-direct", {"name": "kimi-internal", "namespace": NS}))
    # Without a grant in the model's namespace the gateway refuses the reference: no door.
    assert gate(kube, release).status == "pass"
    plant(rest, NS, grant("allow-apps"))
    check = gate(kube, release)
    assert check.status == "fail"
    assert ("HTTPRoute apps/kimi-direct: sends requests to Service kimi-internal in model-serving, allowed by "
            "ReferenceGrant model-serving/allow-apps, outside kimi-ops's admission; delete the route or take "
            "Service kimi-internal out of the grant") in check.reason
    assert "ReferenceGrant model-serving/allow-apps:" not in check.reason  # named once, in the route's line
    assert gate(kube, release, "staging").status == "warn"


def test_a_grpc_route_to_the_model_inference_pool_through_a_named_grant_fails_prod(
        kube: KubeStandIn, release: ReleaseManifest) -> None:
    rest = kube.rest()
    plant(rest, NS, {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
                     "metadata": {"name": "kimi-pool"},
                     "spec": {"selector": {"matchLabels": {"app": "kimi-prod"}}, "targetPorts": [{"number": 8000}],
                              "endpointPickerRef": {"kind": "Service", "name": "kimi-epp", "port": {"number": 9002}}}})
    plant(rest, APPS, route("GRPCRoute", "pool-direct", {"group": "inference.networking.k8s.io",
                                                         "kind": "InferencePool", "name": "kimi-pool",
                                                         "namespace": NS}))
    plant(rest, NS, grant("allow-pool", source_kind="GRPCRoute",
                          to={"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "kimi-pool"}))
    check = gate(kube, release)
    assert check.status == "fail"
    assert "GRPCRoute apps/pool-direct: sends requests to InferencePool kimi-pool in model-serving" in check.reason
    assert "ReferenceGrant model-serving/allow-pool" in check.reason


@pytest.mark.parametrize("covers", [
    pytest.param({"to": {"group": "", "kind": "Service", "name": "web"}}, id="another-service-by-name"),
    pytest.param({"to": {"group": "inference.networking.k8s.io", "kind": "InferencePool"}}, id="pools-only"),
    pytest.param({"source_ns": NS}, id="kimi-ops-own-route-namespace"),
])
def test_a_reference_grant_that_lets_no_other_namespace_reach_a_model_backend_is_no_door(
        kube: KubeStandIn, release: ReleaseManifest, covers: dict[str, Any]) -> None:
    """kimi-ops's own route lives beside the model Service and needs no grant: a grant from that namespace is no door."""
    rest = kube.rest()
    plant(rest, APPS, route("HTTPRoute", "kimi-direct", {"name": "kimi-internal", "namespace": NS}))
    plant(rest, NS, grant("narrow", **covers))
    check = gate(kube, release)
    assert check.status == "pass", check.reason


@pytest.mark.parametrize(("covers", "lets"), [
    pytest.param({"source_ns": "other-team"}, "HTTPRoutes in namespace other-team", id="no-route-yet"),
    pytest.param({"source_kind": "GRPCRoute"}, "GRPCRoutes in namespace apps", id="routes-of-another-kind"),
])
def test_a_reference_grant_to_the_model_service_is_a_door_before_any_route_uses_it(
        kube: KubeStandIn, release: ReleaseManifest, covers: dict[str, Any], lets: str) -> None:
    """Anyone who may write a route in the granted namespace can reach Kimi K3 outside kimi-ops's admission."""
    rest = kube.rest()
    plant(rest, APPS, route("HTTPRoute", "kimi-direct", {"name": "kimi-internal", "namespace": NS}))
    plant(rest, NS, grant("open-later", **covers))
    check = gate(kube, release)
    assert check.status == "fail"
    assert (f"ReferenceGrant model-serving/open-later: lets {lets} send requests to Service kimi-internal, Service "
            "kimi-prod outside kimi-ops's admission, though no route does yet; delete the grant or take Service "
            "kimi-internal, Service kimi-prod out of its spec.to") in check.reason
    assert "apps/kimi-direct" not in check.reason  # the route is not let in by this grant
    assert gate(kube, release, "staging").status == "warn"


@pytest.mark.parametrize("version", [
    pytest.param("v1", id="v1-as-gateway-api-1.6-serves"),
    pytest.param("v1alpha2", id="v1alpha2-as-an-older-experimental-channel-serves"),
])
def test_tcp_and_tls_routes_to_the_model_service_fail_prod(
        kube: KubeStandIn, release: ReleaseManifest, version: str) -> None:
    """A TCPRoute or TLSRoute (passthrough) reaches the model Service's port as surely as an HTTPRoute."""
    for kind in ("TCPRoute", "TLSRoute"):
        kube.serve(kind, version)
    rest = kube.rest()
    plant(rest, NS, route("TCPRoute", "raw-tcp", {"name": "kimi-internal"}, version))
    plant(rest, APPS, route("TLSRoute", "sni-passthrough", {"name": "kimi-internal", "namespace": NS}, version))
    plant(rest, NS, grant("allow-tls", source_kind="TLSRoute"))
    check = gate(kube, release)
    assert check.status == "fail"
    assert ("TCPRoute model-serving/raw-tcp: sends requests to Service kimi-internal outside kimi-ops's admission; "
            "delete it") in check.reason
    assert ("TLSRoute apps/sni-passthrough: sends requests to Service kimi-internal in model-serving, allowed by "
            "ReferenceGrant model-serving/allow-tls") in check.reason


def test_a_cluster_without_the_tcp_and_tls_route_crds_holds_no_such_door(
        kube: KubeStandIn, release: ReleaseManifest) -> None:
    for kind in ("TCPRoute", "TLSRoute", "GRPCRoute"):
        kube.serve(kind, None)
    check = gate(kube, release)
    assert check.status == "pass", check.reason
