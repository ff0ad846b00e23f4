"""The sandbox's optional traffic layer: the endpoint gets its route block and users reach it through the gateway."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from bot.adapters.cluster import KubernetesCluster
from bot.domain.admission import Admission
from bot.sandbox.stack import Sandbox
from bot.sandbox.traffic import FALLBACK_MODEL


def test_a_sandbox_with_traffic_puts_the_endpoint_behind_the_gateway_stand_in(tmp_path: Path) -> None:
    with Sandbox(tmp_path / "sandbox", traffic=True) as sandbox:
        endpoint = sandbox.endpoint
        assert endpoint.route is not None and endpoint.route.fallback is not None
        assert sandbox.gateway_url is not None
        cluster = KubernetesCluster(sandbox.stand_ins["kube"].api_client())
        written = cluster.set_route(endpoint, Admission.internal(), "sandbox check")
        deadline = time.monotonic() + 10
        status = cluster.route_status(endpoint)
        while time.monotonic() < deadline and not (status and status.generation == written.generation and status.accepted):
            time.sleep(0.05)  # the gateway stand-in's own poll picks the route up
            status = cluster.route_status(endpoint)
        assert status is not None and status.accepted, status

        body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
        user = httpx.post(f"{sandbox.gateway_url}/v1/chat/completions", json=body, timeout=30)
        cohort = httpx.post(f"{sandbox.gateway_url}/v1/chat/completions", json=body, timeout=30,
                            headers=dict([sandbox.cohort() or ("x-kimi-cohort", "no token")]))

        assert user.json()["model"] == FALLBACK_MODEL
        assert cohort.json()["model"] == endpoint.served_model_name


def test_a_sandbox_without_traffic_has_no_route_and_no_gateway(tmp_path: Path) -> None:
    with Sandbox(tmp_path / "sandbox", traffic=False) as sandbox:
        assert sandbox.endpoint.route is None
        assert sandbox.gateway_url is None
