"""Never a silent substitute: requests that need Kimi K3 never reach the fallback, and every answer names its model.

Through kimi-ops's route adapter, kmock's emulator and the gateway stand-in: the
route's ``ResponseHeaderModifier`` filters label each answer with the release
running on the endpoint or the fallback's name, and the stand-in applies
backendRef and rule filters as the Gateway API specifies.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster import KubernetesCluster
from bot.adapters.cluster.rest import collection_path
from bot.adapters.cluster.route import render_route, route_errors
from bot.config import EndpointSettings
from bot.domain.admission import Admission, parse_admission
from bot.route_config import RouteSettings
from bot.sandbox.gateway import GatewayStandIn, ServiceKey
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.traffic import FALLBACK_MODEL, TrafficLayer, read_cohort, route_config, start_traffic_layer
from tests.conftest import START
from tests.world_support import wait_until

NS = "model-serving"
RELEASE = "kimi-k3-2026-08-01"
NEEDS_KIMI = {"x-kimi-requires": "kimi-k3"}


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace=NS)
        # What the release apply leaves on the endpoint object: the release it runs.
        stand_in.rest().create(collection_path("InferenceEndpointConfig", NS), {
            "apiVersion": "inference.sagemaker.aws.amazon.com/v1", "kind": "InferenceEndpointConfig",
            "metadata": {"name": "kimi-prod", "namespace": NS, "annotations": {"kimi-ops.io/release": RELEASE}},
            "spec": {}})
        yield stand_in


@pytest.fixture()
def layer(kube: KubeStandIn) -> Iterator[tuple[TrafficLayer, KubernetesCluster, EndpointSettings]]:
    with OpenAIServer(served_model="Kimi-K3") as model:
        traffic = start_traffic_layer(kube.rest(), namespace=NS, endpoint="kimi-prod", model_url=model.url, seed=5)
        try:
            endpoint = EndpointSettings(name="kimi-prod", namespace=NS, route=RouteSettings.model_validate(route_config()))
            yield traffic, KubernetesCluster(kube.api_client(), clock=FrozenClock(START)), endpoint
        finally:
            traffic.stop()


def ask(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"Connection": "close", **(headers or {})},
                      timeout=30)


def admit(cluster: KubernetesCluster, endpoint: EndpointSettings, admission: Admission) -> None:
    written = cluster.set_route(endpoint, admission, f"test: {admission}")
    wait_until(f"the gateway serving {admission}", lambda: (
        (s := cluster.route_status(endpoint)) is not None and s.generation == written.generation and s.accepted))


def who(response: httpx.Response) -> str:
    """The model that answered, as the answer's label says (a 500 from the gateway has none)."""
    return response.headers.get("x-kimi-model") or f"HTTP {response.status_code}"


def test_a_request_that_needs_kimi_is_never_answered_by_the_fallback(kube: KubeStandIn, layer: Any) -> None:
    traffic, cluster, endpoint = layer
    expected = {  # admission → (ordinary, ordinary needing Kimi K3, cohort needing Kimi K3)
        "closed": (FALLBACK_MODEL, "HTTP 500", "HTTP 500"),
        "internal": (FALLBACK_MODEL, "HTTP 500", RELEASE),
        "open": (RELEASE, RELEASE, RELEASE),
    }
    for word, (ordinary, needs, cohort_needs) in expected.items():
        admit(cluster, endpoint, parse_admission(word))
        found = read_cohort(kube.rest(), NS, "kimi-prod-cohort")
        assert found is not None
        cohort = {found[0]: found[1]}
        assert who(ask(traffic.url)) == ordinary, word
        assert who(ask(traffic.url, NEEDS_KIMI)) == needs, word
        assert who(ask(traffic.url, {**cohort, **NEEDS_KIMI})) == cohort_needs, word
    # A share admits ordinary users to Kimi K3: every request that needs it gets it, none the fallback.
    admit(cluster, endpoint, Admission.share(10))
    assert {who(ask(traffic.url, NEEDS_KIMI)) for _ in range(12)} == {RELEASE}
    # Every answer through the gateway said which model wrote it; the unavailable ones were the gateway's own.
    labels = traffic.gateway.labels()
    assert set(labels) == {RELEASE, FALLBACK_MODEL} and "(unlabelled)" not in labels


@pytest.mark.parametrize("state", ["closed", "internal", "10%", "open"])
def test_the_rendered_routes_label_every_backend_and_validate_on_the_crd(state: str) -> None:
    endpoint = EndpointSettings(name="kimi-prod", namespace=NS, route=RouteSettings.model_validate(route_config()))
    route = render_route(endpoint, parse_admission(state), "x", "2026-12-01T09:00:00+00:00", "t0ken")
    assert route_errors(route) == []
    for rule in route["spec"]["rules"]:
        for ref in rule["backendRefs"]:
            [modifier] = ref["filters"]
            assert modifier["type"] == "ResponseHeaderModifier"
            [header] = modifier["responseHeaderModifier"]["set"]
            assert header == {"name": "x-kimi-model",
                              "value": FALLBACK_MODEL if ref["name"] == "kimi-fallback" else "Kimi-K3"}


def test_the_stand_in_applies_rule_and_backend_filters_as_the_gateway_api_says(kube: KubeStandIn) -> None:
    with OpenAIServer(served_model="Kimi-K3") as model:
        backends = {ServiceKey(NS, "kimi", 8000): model.url}
        with GatewayStandIn(kube.rest(), name="gw", namespace=NS, backends=backends, seed=1) as gateway:
            kube.rest().create(collection_path("HTTPRoute", NS), {
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "filters", "namespace": NS},
                "spec": {"parentRefs": [{"name": "gw"}], "rules": [{
                    "filters": [{"type": "ResponseHeaderModifier", "responseHeaderModifier": {
                        "add": [{"name": "x-rule", "value": "r"}], "remove": ["Content-Type"]}}],
                    "backendRefs": [{"name": "kimi", "port": 8000, "filters": [
                        {"type": "ResponseHeaderModifier", "responseHeaderModifier": {
                            "set": [{"name": "X-Kimi-Model", "value": "rel-a"}, {"name": "x-rule", "value": "b"}]}}]}],
                }]}})
            gateway.sync()
            answer = ask(gateway.url)
            assert answer.status_code == 200
            assert answer.headers["x-kimi-model"] == "rel-a"
            assert answer.headers.get_list("x-rule") == ["b"]  # the backend's set comes after the rule's add
            assert "content-type" not in answer.headers  # names compare case-insensitively
            assert gateway.labels() == {"rel-a": 1}
