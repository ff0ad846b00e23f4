"""The HyperPod Inference Gateway's door: a route backend may be an InferencePool, rendered and honoured like a Service.

The pool kimi-ops renders validates against the Gateway API Inference
Extension's v1 CRD and selects the model pods; the route's backend reference is
the extension's (group ``inference.networking.k8s.io``, no port) and reads back
as the same admission; the gateway stand-in splits weights across pools as the
extension's ``GatewayWeightedAcrossTwoInferencePools`` conformance test checks,
and reports a missing pool as ``BackendNotFound``.
"""

from __future__ import annotations

import copy
import json
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bot.adapters.cluster import render_manifest
from bot.adapters.cluster.rest import collection_path
from bot.adapters.cluster.route import render_route, route_errors
from bot.adapters.cluster.route_read import read_route_status
from bot.adapters.cluster.validate import object_errors, pool_schema_document
from bot.config import EndpointSettings
from bot.domain.admission import Admission
from bot.domain.release import ReleaseManifest
from bot.sandbox.gateway import GatewayStandIn, Routed
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from tests.conftest import EXAMPLE_RELEASE

REPO = Path(__file__).resolve().parents[2]
NS = "model-serving"
POOL_ROUTE = {"gateway": {"name": "hyperpod-gateway", "namespace": "hyperpod-inference-system"},
              "backend": {"kind": "InferencePool", "name": "kimi-pool", "endpoint_picker": {"name": "kimi-epp"}},
              "fallback": {"name": "kimi-fallback", "model_name": "kimi-fallback-small"},
              "cohort_header": {"source": "jwt", "claim": "kimi_cohort"}}


def endpoint(kind: str = "hyperpod") -> EndpointSettings:
    return EndpointSettings(name="kimi-prod", kind=kind, namespace=NS, route=POOL_ROUTE)


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def test_the_shipped_pool_schema_is_the_crds_v1_schema() -> None:
    crd = yaml.safe_load((REPO / "deploy" / "crds" / "inference.networking.k8s.io_inferencepools.yaml").read_text())
    [v1] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert pool_schema_document()["openAPIV3Schema"] == json.loads(json.dumps(_strip(v1["schema"]["openAPIV3Schema"])))


@pytest.mark.parametrize(("kind", "selector"), [
    ("hyperpod", {"app": "kimi-prod"}),
    ("eks", {"app.kubernetes.io/name": "kimi-k3", "app.kubernetes.io/instance": "kimi-prod"}),
])
def test_the_rendered_pool_validates_and_selects_the_model_pods(kind: str, selector: dict[str, str]) -> None:
    release = ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text()))
    objects = render_manifest(release, endpoint(kind), release.tuple_hash()).objects
    [pool] = [o for o in objects if o["kind"] == "InferencePool"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1" and pool["metadata"]["name"] == "kimi-pool"
    assert pool["spec"] == {"selector": {"matchLabels": selector}, "targetPorts": [{"number": 8000}],
                            "endpointPickerRef": {"kind": "Service", "name": "kimi-epp", "port": {"number": 9002}}}
    broken = copy.deepcopy(pool)
    broken["spec"]["targetPorts"] = []
    assert object_errors(broken) == ["InferencePool/kimi-pool spec.targetPorts: [] should be non-empty"]


def test_a_pool_kept_by_the_inference_gateway_is_not_rendered() -> None:
    release = ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text()))
    kept = EndpointSettings(name="kimi-prod", namespace=NS, route={
        **POOL_ROUTE, "backend": {"kind": "InferencePool", "name": "kimi-pool", "render_pool": False}})
    assert not [o for o in render_manifest(release, kept, release.tuple_hash()).objects if o["kind"] == "InferencePool"]


@pytest.mark.parametrize("admission", [Admission.closed(), Admission.internal(), Admission.share(25), Admission.open()])
def test_a_route_to_a_pool_validates_and_reads_back_as_written(admission: Admission) -> None:
    ep = endpoint()
    route = render_route(ep, admission, "x", "2026-12-01T09:00:00+00:00")
    assert route_errors(route) == []
    pool_refs = [r for rule in route["spec"]["rules"] for r in rule["backendRefs"] if r["name"] == "kimi-pool"]
    assert pool_refs and all(r["group"] == "inference.networking.k8s.io" and r["kind"] == "InferencePool"
                             and "port" not in r for r in pool_refs)
    status = read_route_status(route, ep)
    assert status.effective == admission and status.problems == ()


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace=NS)
        yield stand_in


def _pool(kube: KubeStandIn, name: str) -> None:
    kube.rest().create(collection_path("InferencePool", NS), {
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": name}}, "targetPorts": [{"number": 8000}]}})


def _route(kube: KubeStandIn, name: str, refs: list[dict[str, Any]]) -> None:
    kube.rest().create(collection_path("HTTPRoute", NS), {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": name, "namespace": NS},
        "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": refs}]}})


def test_the_stand_in_splits_across_two_pools_as_the_extensions_conformance_test_checks(kube: KubeStandIn) -> None:
    total, primary_weight = 200, 70
    with OpenAIServer(served_model="primary") as primary, OpenAIServer(served_model="secondary") as secondary, \
            GatewayStandIn(kube.rest(), name="gw", namespace=NS, seed=11) as gateway:
        for name, server in (("primary-pool", primary), ("secondary-pool", secondary)):
            _pool(kube, name)
            gateway.add_pool(NS, name, server.url)
        _route(kube, "weighted-two-pools", [
            {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "primary-pool", "weight": 70},
            {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "secondary-pool", "weight": 30}])
        gateway.sync()
        body = {"messages": [{"role": "user", "content": "Write as if you were a critic: San Francisco"}], "max_tokens": 4}
        with httpx.Client(timeout=30) as client:
            models = Counter(client.post(f"{gateway.url}/v1/chat/completions", json=body).json()["model"]
                             for _ in range(total))
    assert sum(models.values()) == total and set(models) == {"primary", "secondary"}
    expected = primary_weight / 100
    tolerance = max(0.10, 4.5 * math.sqrt(expected * (1 - expected) / total))  # the conformance test's bound
    assert abs(models["primary"] / total - expected) <= tolerance


def test_a_route_to_a_pool_that_does_not_exist_is_not_resolved_and_answers_500(kube: KubeStandIn) -> None:
    with GatewayStandIn(kube.rest(), name="gw", namespace=NS, seed=1) as gateway:
        _route(kube, "to-non-existent-pool", [
            {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "non-existent-inference-pool"}])
        gateway.sync()
        stored = kube.rest().get(f"{collection_path('HTTPRoute', NS)}/to-non-existent-pool")
        assert stored is not None
        conditions = {c["type"]: c for c in stored["status"]["parents"][0]["conditions"]}
        assert conditions["Accepted"]["status"] == "True"
        assert (conditions["ResolvedRefs"]["status"], conditions["ResolvedRefs"]["reason"]) == ("False", "BackendNotFound")
        answer = httpx.post(f"{gateway.url}/v1/chat/completions", json={"messages": []}, timeout=30)
        assert answer.status_code == 500 and gateway.counts() == Counter({Routed("unavailable", False): 1})
