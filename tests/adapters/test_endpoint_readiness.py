"""Readiness completions against the local OpenAI-compatible stand-in, over real HTTP.

Each failure kind an operator can meet (refused connection, timeout, HTTP error with
vLLM's message, empty answer, wrong model, missing finish reason, unhealthy engine)
must come back as a result with that kind and a reason naming the cause.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest

from bot.adapters.endpoint import HttpEndpointClient
from bot.adapters.endpoint.openai import READINESS_PROMPT
from bot.config import EndpointSettings
from bot.sandbox.openai_server import OpenAIServer

SERVED = "Kimi-K3"


@pytest.fixture()
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(served_model=SERVED, reply="Ready to serve.") as running:
        yield running


@pytest.fixture()
def endpoint(server: OpenAIServer) -> EndpointSettings:
    return EndpointSettings(name="kimi-test", url=server.url, served_model_name=SERVED)


@pytest.fixture()
def client() -> HttpEndpointClient:
    return HttpEndpointClient(timeout=5.0, connect_timeout=2.0)


def test_good_endpoint_answers_with_timings_and_token_count(server, endpoint, client) -> None:
    result = client.readiness(endpoint)

    assert result.ok, result.summary
    assert result.http_status == 200
    assert result.failure_kind is None and result.error is None
    assert 0 < result.ttft_ms <= result.total_ms
    assert result.completion_tokens == 3  # "Ready to serve." streamed as three tokens, counted by the usage chunk
    assert result.summary.startswith("answered: first token")
    assert server.stats().served == 1


def test_slow_first_token_is_measured_not_failed(server, endpoint, client) -> None:
    server.configure(first_token_delay=0.3)

    result = client.readiness(endpoint)

    assert result.ok, result.summary
    assert result.ttft_ms >= 300
    assert result.total_ms >= result.ttft_ms


def test_reasoning_model_passes_when_it_also_answers(server, endpoint, client) -> None:
    server.configure(reasoning="The user wants one word.")

    result = client.readiness(endpoint)

    assert result.ok, result.summary
    assert result.completion_tokens == 8  # five reasoning tokens, then three answer tokens


def test_reasoning_that_uses_up_max_tokens_is_an_empty_answer(server, endpoint) -> None:
    server.configure(reasoning=" ".join(["thinking"] * 40))
    client = HttpEndpointClient(timeout=5.0, max_tokens=16)

    result = client.readiness(endpoint)

    assert not result.ok
    assert result.failure_kind == "empty_answer"
    assert "max_tokens=16" in result.error


def test_http_500_surfaces_the_servers_error_message(server, endpoint, client) -> None:
    server.configure(fail_status=500, fail_message="EngineCore encountered an issue: CUDA out of memory")

    result = client.readiness(endpoint)

    assert not result.ok
    assert result.failure_kind == "http_status"
    assert result.http_status == 500
    assert "CUDA out of memory" in result.error
    assert "HTTP 500" in result.error


def test_legacy_flat_error_body_is_read_too(server, endpoint, client) -> None:
    server.configure(fail_status=400, error_shape="flat", fail_message="max_tokens must be at least 1, got -186.")

    result = client.readiness(endpoint)

    assert result.failure_kind == "http_status"
    assert result.http_status == 400
    assert result.error.endswith("max_tokens must be at least 1, got -186.")


def test_empty_answer_is_reported(server, endpoint, client) -> None:
    server.configure(empty_answer=True)

    result = client.readiness(endpoint)

    assert not result.ok
    assert result.failure_kind == "empty_answer"
    assert "no text" in result.error


def test_model_missing_from_the_model_list_is_wrong_model(server, endpoint, client) -> None:
    server.configure(served_model="Kimi-K2-Instruct")

    result = client.readiness(endpoint)

    assert not result.ok
    assert result.failure_kind == "wrong_model"
    assert "'Kimi-K3' is not served here" in result.error
    assert "Kimi-K2-Instruct" in result.error
    assert server.stats().served == 0  # no completion was attempted against the wrong model


def test_answer_from_another_model_is_wrong_model(server, endpoint, client) -> None:
    server.configure(answer_model="Kimi-K2-Instruct")

    result = client.readiness(endpoint)

    assert result.failure_kind == "wrong_model"
    assert "Kimi-K2-Instruct" in result.error


def test_missing_finish_reason_is_reported(server, endpoint, client) -> None:
    server.configure(omit_finish_reason=True)

    result = client.readiness(endpoint)

    assert not result.ok
    assert result.failure_kind == "no_finish_reason"


def test_dead_engine_health_is_reported(server, endpoint, client) -> None:
    server.configure(health_status=503)

    result = client.readiness(endpoint)

    assert not result.ok
    assert result.failure_kind == "unhealthy"
    assert result.http_status == 503
    assert "/health answered HTTP 503" in result.error


def test_connection_refused_on_a_closed_port(client) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # The socket is closed: nothing listens on the port, as while vLLM is still loading the model.
    endpoint = EndpointSettings(name="kimi-test", url=f"http://127.0.0.1:{port}", served_model_name=SERVED)

    result = client.readiness(endpoint)

    assert not result.ok
    assert result.failure_kind == "connection_refused"
    assert "connection refused" in result.error
    assert result.http_status is None


def test_server_slower_than_the_client_timeout_is_a_timeout(server, endpoint) -> None:
    server.configure(first_token_delay=30.0)
    client = HttpEndpointClient(timeout=0.3, connect_timeout=2.0)

    result = client.readiness(endpoint)

    assert not result.ok
    assert result.failure_kind == "timeout"
    assert "0.3 s" in result.error


def test_endpoint_url_with_a_trailing_slash_works(server, client) -> None:
    endpoint = EndpointSettings(name="kimi-test", url=f"{server.url}/", served_model_name=SERVED)

    assert client.readiness(endpoint).ok


def test_prompt_and_answer_are_never_logged_or_returned(server, endpoint, client, caplog) -> None:
    server.configure(reply="zebra-quartz-answer")
    caplog.set_level(logging.DEBUG)

    result = client.readiness(endpoint)

    assert result.ok
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "readiness completion against kimi-test" in logged
    assert READINESS_PROMPT not in logged
    assert "zebra" not in logged
    assert "zebra" not in repr(result)


@pytest.mark.parametrize("shape", ["wrapped", "flat"])
def test_error_event_in_the_middle_of_the_stream_is_reported(server, endpoint, client, shape) -> None:
    server.configure(fail_after_tokens=1, error_shape=shape, fail_message="EngineDeadError: the engine died")

    result = client.readiness(endpoint)

    assert not result.ok
    assert result.failure_kind == "http_status"
    assert result.http_status == 500
    assert result.error == "error during the stream: EngineDeadError: the engine died"


def test_url_without_a_scheme_is_a_protocol_failure_not_a_crash(client) -> None:
    endpoint = EndpointSettings(name="kimi-test", url="kimi-k3.model-serving.svc:8000", served_model_name=SERVED)

    result = client.readiness(endpoint)

    assert not result.ok
    assert result.failure_kind == "protocol"
    assert "kimi-k3.model-serving.svc:8000" in result.error
