"""The route at work: kimi-ops writes it through the cluster adapter, the gateway stand-in serves it.

Everything runs over real HTTP: kmock's Kubernetes emulator holds the HTTPRoute,
the gateway stand-in reads it with the official client and proxies to two
OpenAI-compatible stand-ins (Kimi K3 and a smaller fallback serving another model
name, so every answer says which model wrote it). The weighted split is checked
the way the Gateway API conformance suite checks it (``HTTPRouteWeight``: 500
requests, 10 at a time, each backend's share within ±0.05 of its weight), with a
seeded gateway so the test is deterministic.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster import ROUTE_MANAGER, InvalidManifest, KubernetesCluster
from bot.adapters.cluster.rest import object_path
from bot.adapters.endpoint import HttpEndpointClient
from bot.config import EndpointSettings
from bot.domain.admission import Admission, RouteStatus
from bot.route_config import RouteSettings
from bot.sandbox.gateway import (
    NO_ROUTE,
    UNAVAILABLE,
    GatewayStandIn,
    Routed,
    ServiceKey,
)
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.traffic import (
    FALLBACK_MODEL,
    TrafficLayer,
    cohort_secret_name,
    read_cohort,
    route_config,
    start_traffic_layer,
)
from tests.conftest import START

NS = "model-serving"
EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "gateway-api"
# The conformance suite's weight check (conformance/utils/weight/weight.go, TestWeightedDistribution).
CONFORMANCE_REQUESTS, CONFORMANCE_CONCURRENCY, CONFORMANCE_TOLERANCE = 500, 10, 0.05


@dataclass
class Stack:
    kube: KubeStandIn
    cluster: KubernetesCluster
    model: OpenAIServer
    traffic: TrafficLayer
    endpoint: EndpointSettings

    @property
    def gateway(self) -> GatewayStandIn:
        return self.traffic.gateway

    def cohort(self) -> dict[str, str]:
        """What an internal user sends: the header with the token the last closing put in the Secret."""
        found = read_cohort(self.kube.rest(), NS, cohort_secret_name("kimi-prod"))
        assert found is not None, "no cohort token yet: the route has not been closed"
        return {found[0]: found[1]}

    def set(self, admission: Admission, endpoint: EndpointSettings | None = None) -> RouteStatus:
        """Write the route and wait until the gateway has accepted that generation (as the engine will)."""
        ep = endpoint or self.endpoint
        written = self.cluster.set_route(ep, admission, f"test: {admission}")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self.gateway.sync()
            status = self.cluster.route_status(ep)
            if status is not None and status.generation == written.generation and status.accepted:
                return status
            time.sleep(0.02)
        raise AssertionError(f"the gateway never accepted {admission}: {self.cluster.route_status(ep)}")


# One pooled client for every request of the module: a new httpx client per request costs more CPU than
# the request itself, and the weight tests send hundreds.
HTTP = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=32))


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    HTTP.close()


def chat(url: str, headers: dict[str, str] | None = None, *, stream: bool = False) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": "Say hello."}], "stream": stream, "max_tokens": 8}
    # A fresh connection per request: the upstream stand-ins go away between tests, pooled sockets with them.
    return HTTP.post(f"{url}/v1/chat/completions", json=body, headers={"Connection": "close", **(headers or {})})


def model_of(response: httpx.Response) -> str:
    return str(response.json()["model"])


@pytest.fixture()
def metrics_client() -> Iterator[HttpEndpointClient]:
    """kimi-ops's own endpoint client, as the engine reads /metrics; closed after the test (its pool keeps sockets)."""
    client = HttpEndpointClient(timeout=10)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace=NS)
        yield stand_in


@pytest.fixture()
def stack(kube: KubeStandIn) -> Iterator[Stack]:
    with OpenAIServer(served_model="Kimi-K3") as model:
        traffic = start_traffic_layer(kube.rest(), namespace=NS, endpoint="kimi-prod", model_url=model.url, seed=13)
        try:
            ep = EndpointSettings(name="kimi-prod", namespace=NS, url=model.url,
                                  route=RouteSettings.model_validate(route_config()))
            cluster = KubernetesCluster(kube.api_client(), clock=FrozenClock(START))
            yield Stack(kube, cluster, model, traffic, ep)
        finally:
            traffic.stop()


# -- status written by the gateway, read back through the adapter ---------------------------------------------


def test_the_route_is_applied_under_its_own_field_manager_and_read_back_with_the_gateways_verdict(stack: Stack) -> None:
    assert stack.cluster.route_status(stack.endpoint) is None

    status = stack.set(Admission.internal())

    assert status.annotated == status.effective == Admission.internal()
    assert status.reason == "test: internal" and status.changed_at == START.isoformat()
    (parent,) = status.parents
    assert parent.gateway == "gateways/kimi-gateway"
    assert parent.holds("Accepted", status.generation) is True
    assert parent.holds("ResolvedRefs", status.generation) is True
    stored = stack.kube.rest().get(object_path("HTTPRoute", "kimi-prod", NS))
    assert stored is not None
    assert [m["manager"] for m in stored["metadata"]["managedFields"]] == [ROUTE_MANAGER]


def test_a_new_admission_is_a_new_generation_the_gateway_must_accept_again(stack: Stack) -> None:
    first = stack.set(Admission.closed())
    written = stack.cluster.set_route(stack.endpoint, Admission.share(25), "step 1")

    assert written.generation == (first.generation or 0) + 1
    assert written.effective == Admission.share(25)
    assert not written.accepted  # the gateway has not seen this generation yet
    assert stack.set(Admission.share(25)).accepted


def test_a_route_naming_a_service_the_gateway_cannot_resolve_says_so_and_answers_500(stack: Stack) -> None:
    data = route_config()
    data["fallback"]["name"] = "no-such-fallback"
    lost = stack.endpoint.model_copy(update={"route": RouteSettings.model_validate(data)})
    stack.cluster.set_route(lost, Admission.closed(), "x")
    stack.gateway.sync()

    status = stack.cluster.route_status(lost)

    assert status is not None and not status.accepted
    (parent,) = status.parents
    refs = parent.condition("ResolvedRefs")
    assert refs is not None and (refs.status, refs.reason) == ("False", "BackendNotFound")
    assert "no-such-fallback" in refs.message
    assert chat(stack.gateway.url).status_code == 500


def test_a_route_for_a_listener_the_gateway_lacks_is_not_accepted_and_not_served(stack: Stack) -> None:
    data = route_config()
    data["gateway"]["section_name"] = "grpc"
    elsewhere = stack.endpoint.model_copy(update={"route": RouteSettings.model_validate(data)})
    stack.cluster.set_route(elsewhere, Admission.open(), "x")
    stack.gateway.sync()

    status = stack.cluster.route_status(elsewhere)

    assert status is not None and not status.accepted
    accepted = status.parents[0].condition("Accepted")
    assert accepted is not None and (accepted.status, accepted.reason) == ("False", "NoMatchingParent")
    assert chat(stack.gateway.url).status_code == 404


# -- what users get under each admission ----------------------------------------------------------------------


def test_closed_sends_every_user_to_the_fallback_cohort_included(stack: Stack) -> None:
    stack.set(Admission.closed())

    answers = [chat(stack.gateway.url, headers) for headers in ({}, stack.cohort(), {}, stack.cohort())]

    assert [r.status_code for r in answers] == [200] * 4
    assert {model_of(r) for r in answers} == {FALLBACK_MODEL}
    assert stack.gateway.counts() == Counter({Routed("kimi-fallback", False): 2, Routed("kimi-fallback", True): 2})


def test_closed_without_a_fallback_is_the_gateways_500_and_kimi_sees_nothing(
        stack: Stack, metrics_client: HttpEndpointClient) -> None:
    assert stack.endpoint.route is not None
    alone = stack.endpoint.model_copy(update={"route": stack.endpoint.route.model_copy(update={"fallback": None})})
    before = metrics_client.metrics(alone)
    stack.set(Admission.closed(), alone)

    answers = [chat(stack.gateway.url, headers) for headers in ({}, stack.cohort(), {})]

    assert [r.status_code for r in answers] == [500, 500, 500]
    assert stack.gateway.counts() == Counter({Routed(UNAVAILABLE, False): 2, Routed(UNAVAILABLE, True): 1})
    after = metrics_client.metrics(alone)
    assert before.requests_finished is not None
    assert after.requests_finished == before.requests_finished


def test_internal_lets_only_the_cohort_header_reach_kimi(stack: Stack) -> None:
    stack.set(Admission.internal())

    cohort = [chat(stack.gateway.url, stack.cohort()) for _ in range(3)]
    others = [chat(stack.gateway.url, {"x-kimi-cohort": "external"}), chat(stack.gateway.url),
              chat(stack.gateway.url, {"X-Kimi-Cohort": "Internal"})]  # header names fold case, values do not

    assert {model_of(r) for r in cohort} == {"Kimi-K3"}
    assert {model_of(r) for r in others} == {FALLBACK_MODEL}
    assert stack.gateway.counts() == Counter({Routed("kimi-prod", True): 3, Routed("kimi-fallback", False): 3})


def test_the_engine_can_tell_no_user_reached_kimi_while_closed_from_vllms_counter(
        stack: Stack, metrics_client: HttpEndpointClient) -> None:
    client = metrics_client
    stack.set(Admission.closed())
    before = client.metrics(stack.endpoint)
    for _ in range(5):
        assert chat(stack.gateway.url).status_code == 200  # users, through the gateway: the fallback answers
    own = 2
    for _ in range(own):
        assert chat(stack.model.url).status_code == 200  # the engine's own readiness requests, straight to the model

    after = client.metrics(stack.endpoint)

    assert before.requests_finished is not None and after.requests_finished is not None
    assert after.requests_finished - before.requests_finished - own == 0

    stack.set(Admission.internal())
    chat(stack.gateway.url, stack.cohort())
    assert (client.metrics(stack.endpoint).requests_finished or 0) - after.requests_finished == 1


def test_open_sends_everyone_to_kimi(stack: Stack) -> None:
    stack.set(Admission.open())
    assert {model_of(chat(stack.gateway.url, h)) for h in ({}, stack.cohort(), {})} == {"Kimi-K3"}


def test_a_share_splits_ordinary_traffic_by_weight_within_the_conformance_tolerance(stack: Stack) -> None:
    stack.set(Admission.share(25))

    def send(index: int) -> str:
        response = chat(stack.gateway.url, stack.cohort() if index % 5 == 0 else None)
        assert response.status_code == 200
        return model_of(response)

    with ThreadPoolExecutor(CONFORMANCE_CONCURRENCY) as pool:
        list(pool.map(send, range(CONFORMANCE_REQUESTS + CONFORMANCE_REQUESTS // 4)))

    counts = stack.gateway.counts()
    ordinary = counts[Routed("kimi-prod", False)] + counts[Routed("kimi-fallback", False)]
    assert ordinary == CONFORMANCE_REQUESTS
    assert abs(counts[Routed("kimi-prod", False)] / ordinary - 0.25) <= CONFORMANCE_TOLERANCE
    assert abs(counts[Routed("kimi-fallback", False)] / ordinary - 0.75) <= CONFORMANCE_TOLERANCE
    assert counts[Routed("kimi-prod", True)] == CONFORMANCE_REQUESTS // 4  # the cohort always reaches Kimi K3
    assert counts[Routed("kimi-fallback", True)] == 0


def test_a_share_without_a_fallback_is_refused_before_anything_is_applied(stack: Stack) -> None:
    assert stack.endpoint.route is not None
    alone = stack.endpoint.model_copy(update={"route": stack.endpoint.route.model_copy(update={"fallback": None})})
    with pytest.raises(InvalidManifest, match=r"needs route\.fallback"):
        stack.cluster.set_route(alone, Admission.share(10), "x")
    assert stack.cluster.route_status(alone) is None


def test_a_streamed_completion_passes_through_the_gateway_intact(stack: Stack) -> None:
    stack.set(Admission.internal())
    stack.model.configure(first_token_delay=0.05, token_delay=0.01)
    body = {"messages": [{"role": "user", "content": "Say hello."}], "stream": True,
            "stream_options": {"include_usage": True}}

    direct = httpx.post(f"{stack.model.url}/v1/chat/completions", json=body, timeout=30)
    cohort = stack.cohort()
    with httpx.stream("POST", f"{stack.gateway.url}/v1/chat/completions", json=body, headers=cohort, timeout=30) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]

    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]

    def text(items: list[dict[str, Any]]) -> str:
        return "".join((c["choices"][0]["delta"].get("content") or "") for c in items if c["choices"])

    direct_chunks = [json.loads(e.removeprefix("data: ")) for e in direct.text.split("\n\n") if e and e != "data: [DONE]"]
    assert text(chunks) == text(direct_chunks) != ""
    assert len(chunks) == len(direct_chunks)
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    assert {c["model"] for c in chunks} == {"Kimi-K3"}


def test_a_model_service_that_does_not_answer_gets_503(stack: Stack) -> None:
    stack.set(Admission.open())
    stack.model.stop()
    assert chat(stack.gateway.url).status_code == 503
    assert stack.gateway.counts() == Counter({Routed(UNAVAILABLE, False): 1})


# -- the Gateway API's own examples, served by the stand-in ---------------------------------------------------


def _apply_example(kube: KubeStandIn, name: str, namespace: str) -> None:
    (route,) = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d["kind"] == "HTTPRoute"]
    route["metadata"]["namespace"] = namespace
    kube.rest().apply(route, manager="kubectl", force=True)


@pytest.fixture()
def three_backends() -> Iterator[list[OpenAIServer]]:
    servers = [OpenAIServer(served_model=f"infra-backend-v{i}").start() for i in (1, 2, 3)]
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


def test_the_conformance_weight_route_splits_70_30_0_within_tolerance(kube: KubeStandIn,
                                                                     three_backends: list[OpenAIServer]) -> None:
    ns = "gateway-conformance-infra"
    _apply_example(kube, "conformance_httproute-weight.yaml", ns)
    backends = {ServiceKey(ns, f"infra-backend-v{i}", 8080): s.url for i, s in zip((1, 2, 3), three_backends, strict=True)}
    with (
        GatewayStandIn(kube.rest(), name="same-namespace", namespace=ns, backends=backends, seed=7) as gateway,
        ThreadPoolExecutor(CONFORMANCE_CONCURRENCY) as pool,
    ):
        served = Counter(pool.map(lambda _: model_of(chat(gateway.url)), range(CONFORMANCE_REQUESTS)))

    assert set(served) == {"infra-backend-v1", "infra-backend-v2"}  # weight 0 gets nothing
    for name, weight in {"infra-backend-v1": 0.7, "infra-backend-v2": 0.3, "infra-backend-v3": 0.0}.items():
        assert abs(served[name] / CONFORMANCE_REQUESTS - weight) <= CONFORMANCE_TOLERANCE


def test_the_header_routing_example_sends_canary_requests_to_the_canary(kube: KubeStandIn,
                                                                       three_backends: list[OpenAIServer]) -> None:
    ns = "default"
    _apply_example(kube, "http-routing_bar-httproute.yaml", ns)
    backends = {ServiceKey(ns, "bar-svc", 8080): three_backends[0].url,
                ServiceKey(ns, "bar-svc-canary", 8080): three_backends[1].url}
    with GatewayStandIn(kube.rest(), name="example-gateway", namespace=ns, backends=backends,
                        cohort_header="env", seed=1) as gateway:
        host = {"Host": "bar.example.com"}
        assert model_of(chat(gateway.url, {**host, "env": "canary"})) == "infra-backend-v2"
        assert model_of(chat(gateway.url, {**host, "env": "prod"})) == "infra-backend-v1"
        assert model_of(chat(gateway.url, host)) == "infra-backend-v1"
        assert chat(gateway.url, {"Host": "foo.example.com"}).status_code == 404  # not a hostname of the route
        assert gateway.counts()[Routed(NO_ROUTE, False)] == 1
        route = kube.rest().get(object_path("HTTPRoute", "bar-route", ns))
        assert route is not None
        (parent,) = route["status"]["parents"]
        assert {c["type"]: c["status"] for c in parent["conditions"]} == {"Accepted": "True", "ResolvedRefs": "True"}
