"""vLLM's finished-request counter in a metrics snapshot: the engine's "no user traffic while closed" check.

``vllm:request_success_total`` is summed over every label set (finish reason, model,
engine), from vLLM's own documentation sample and from the live stand-in over HTTP.
"""

from __future__ import annotations

import httpx

from bot.adapters.endpoint import HttpEndpointClient, parse_metrics
from bot.config import EndpointSettings
from bot.sandbox.openai_server import OpenAIServer
from tests.adapters.test_endpoint_metrics import doc_sample


def test_the_docs_sample_counts_finished_requests_over_every_finish_reason() -> None:
    snap = parse_metrics(doc_sample("vllm_metrics_docs_design_example.txt"))
    assert snap.requests_finished == 132.0  # stop 1 + length 131 + abort 0


def test_a_server_without_the_counter_reads_as_unknown_not_zero() -> None:
    assert parse_metrics("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n").requests_finished is None


def test_an_untyped_exposition_of_the_bare_name_is_read_too() -> None:
    text = ('vllm:request_success{finished_reason="stop",engine="0"} 2\n'
            'vllm:request_success{finished_reason="stop",engine="1"} 3\n')
    assert parse_metrics(text).requests_finished == 5.0


def test_two_snapshots_of_the_live_stand_in_differ_by_the_requests_served_aborts_included() -> None:
    with OpenAIServer(served_model="Kimi-K3") as server:
        endpoint = EndpointSettings(name="kimi-test", url=server.url, served_model_name="Kimi-K3")
        client = HttpEndpointClient(timeout=10)
        before = client.metrics(endpoint)
        body = {"model": "Kimi-K3", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        for _ in range(3):
            httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=10).raise_for_status()
        server.configure(fail_after_tokens=1)
        httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=10)  # broken off mid-stream: an abort

        after = client.metrics(endpoint)

    assert before.requests_finished == 0.0  # vLLM exposes the series from start
    assert after.requests_finished == 4.0
