"""A cohort nobody can forge: the token is made anew at each closing and kept only in its Secret.

Against kmock's emulator and the gateway stand-in, through kimi-ops's own route
adapter: the last deployment's token and a guessed one are ordinary requests
(the fallback answers them), the current one reaches Kimi K3, and the token
appears nowhere kimi-ops writes but the Secret and the route's match.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster import KubernetesCluster
from bot.adapters.cluster.cohort import cohort_token
from bot.adapters.cluster.route import render_route
from bot.config import ConfigError, EndpointSettings, load_settings
from bot.domain.admission import Admission
from bot.route_config import RouteSettings
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.traffic import FALLBACK_MODEL, cohort_secret_name, read_cohort, route_config, start_traffic_layer
from tests.conftest import START
from tests.world_support import wait_until

NS = "model-serving"


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace=NS)
        yield stand_in


def ask(url: str, headers: dict[str, str]) -> str:
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"Connection": "close", **headers}, timeout=30)
    return str(answer.json()["model"])


def test_last_deployments_token_and_a_guessed_one_never_reach_the_candidate(
        kube: KubeStandIn, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with OpenAIServer(served_model="Kimi-K3") as model:
        traffic = start_traffic_layer(kube.rest(), namespace=NS, endpoint="kimi-prod", model_url=model.url, seed=3)
        try:
            endpoint = EndpointSettings(name="kimi-prod", namespace=NS, route=RouteSettings.model_validate(route_config()))
            cluster = KubernetesCluster(kube.api_client(), clock=FrozenClock(START))
            secret = cohort_secret_name("kimi-prod")

            def admit(admission: Admission) -> None:
                written = cluster.set_route(endpoint, admission, f"test: {admission}")
                wait_until(f"the gateway serving {admission}", lambda: (
                    (s := cluster.route_status(endpoint)) is not None and s.generation == written.generation
                    and s.accepted))

            def token() -> str:
                found = read_cohort(kube.rest(), NS, secret)
                assert found is not None
                return found[1]

            # Deployment 1: closed (a token is made), then the internal cohort.
            admit(Admission.closed())
            first = token()
            admit(Admission.internal())
            assert ask(traffic.url, {"x-kimi-cohort": first}) == "Kimi-K3"
            # Deployment 2 closes again: a new token; the old one, a guessed one and the old fixed word are ordinary.
            admit(Admission.closed())
            second = token()
            assert second != first and len(second) >= 40
            admit(Admission.internal())
            for forged in (first, "internal", second[:-1] + ("A" if second[-1] != "A" else "B")):
                assert ask(traffic.url, {"x-kimi-cohort": forged}) == FALLBACK_MODEL, forged
            assert ask(traffic.url, {"x-kimi-cohort": second}) == "Kimi-K3"
            # Read back, the route's state and words name the Secret, never the value.
            status = cluster.route_status(endpoint)
            assert status is not None and str(status.effective) == "internal"
            assert second not in status.summary and first not in status.summary
            # Not logged by anything in this process (the adapter, the client, the stand-ins).
            assert all(second not in r.getMessage() and first not in r.getMessage() for r in caplog.records)
        finally:
            traffic.stop()


def test_a_token_is_taken_from_the_route_until_the_next_closing_and_never_rendered_without_one(
        kube: KubeStandIn) -> None:
    endpoint = EndpointSettings(name="kimi-prod", namespace=NS, route=RouteSettings.model_validate(route_config()))
    made = cohort_token(kube.rest(), endpoint, rotate=False, live=None)  # no route yet: one is made
    assert made is not None and read_cohort(kube.rest(), NS, cohort_secret_name("kimi-prod")) == ("x-kimi-cohort", made)
    route = render_route(endpoint, Admission.internal(), "step", "2026-12-01T09:00:00+00:00", made)
    assert cohort_token(kube.rest(), endpoint, rotate=False, live=route) == made
    assert cohort_token(kube.rest(), endpoint, rotate=True, live=route) != made
    with pytest.raises(Exception, match="the internal cohort's token is needed"):
        render_route(endpoint, Admission.internal(), "step", "2026-12-01T09:00:00+00:00")


def test_a_jwt_cohort_matches_the_claim_the_gateway_writes_and_a_fixed_one_is_refused_on_prod(tmp_path: object) -> None:
    jwt = EndpointSettings(name="kimi-prod", route=RouteSettings.model_validate({
        "gateway": {"name": "gw"}, "cohort_header": {"source": "jwt", "claim": "kimi_cohort"}}))
    route = render_route(jwt, Admission.internal(), "step", "2026-12-01T09:00:00+00:00")
    assert route["spec"]["rules"][0]["matches"][0]["headers"] == [
        {"type": "Exact", "name": "x-kimi-cohort", "value": "internal"}]
    with pytest.raises(ConfigError, match=r"kimi-prod \(prod\): its internal cohort is a header value any client can set"):
        load_settings(data_dir=tmp_path, endpoints=[{"name": "kimi-prod", "kind": "eks", "route": {
            "gateway": {"name": "gw"}, "cohort_header": {"name": "x-kimi-cohort", "value": "internal"}}}])
    with pytest.raises(ConfigError, match="a token cohort's value is made per deployment"):
        load_settings(data_dir=tmp_path, endpoints=[{"name": "kimi-prod", "kind": "eks", "route": {
            "gateway": {"name": "gw"}, "cohort_header": {"source": "token", "value": "internal"}}}])
