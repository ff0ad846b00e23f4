"""The evaluation and sweep client (``stream_chat``) against a vLLM stand-in misbehaving on purpose, over real HTTP.

Each row is one way a real vLLM stream goes wrong after the 200 — an error event in current vLLM's shape or the
legacy flat one, a connection cut before any finish reason, a stream without ``data: [DONE]``, a missing finish
reason — and what the answer must say. None of them may count as an answer, in the model gate or in the sweep,
as the readiness client already judges them. Add a row for a new misbehaviour.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from bot.adapters.endpoint import HttpEndpointClient
from bot.adapters.endpoint.evaluation import STOPPED, HttpEvaluator, stream_chat
from bot.adapters.endpoint.loadgen import _Sampler
from bot.adapters.endpoint.metrics import parse_metrics
from bot.config import EndpointSettings
from bot.domain.evaluation import EvalCase
from bot.domain.own_requests import Counted
from bot.domain.sweep import Sample
from bot.sandbox.openai_server import OpenAIServer

SERVED = "Kimi-K3"
BODY = {"model": SERVED, "messages": [{"role": "user", "content": "Say hello in five words."}], "max_tokens": 16}

# (misbehaviour given to the stand-in, what the answer's error says)
BROKEN: list[tuple[str, dict[str, Any], str]] = [
    ("error event, current shape", {"fail_after_tokens": 1, "fail_message": "EngineDeadError: the engine died"},
     "error during the stream: EngineDeadError: the engine died"),
    ("error event, legacy flat shape", {"fail_after_tokens": 1, "error_shape": "flat", "fail_message": "CUDA out of memory"},
     "error during the stream: CUDA out of memory"),
    ("error event before any token", {"fail_after_tokens": 0, "fail_message": "prompt too long"},
     "error during the stream: prompt too long"),
    ("connection cut mid-answer", {"cut_after_tokens": 1}, "the stream ended without a finish reason"),
    ("connection cut before any token", {"cut_after_tokens": 0}, "the stream ended without a finish reason"),
    ("no finish reason", {"omit_finish_reason": True}, "the stream ended without a finish reason"),
    ("no [DONE]", {"omit_done": True}, "the stream ended before data: [DONE]"),
]


@pytest.fixture()
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(served_model=SERVED, reply="Hello there, how are you?") as running:
        yield running


def test_a_whole_stream_is_an_answer(server: OpenAIServer) -> None:
    with httpx.Client(timeout=5) as client:
        answer = stream_chat(client, server.url, BODY)
    assert answer.error is None and answer.finish_reason == "stop" and answer.content == "Hello there, how are you?"
    assert Sample(phase="steady", status=answer.http_status, ttft_ms=answer.ttft_ms, total_ms=answer.latency_ms).ok


@pytest.mark.parametrize(("misbehaviour", "says"), [pytest.param(m, s, id=i) for i, m, s in BROKEN])
def test_a_broken_stream_is_a_failure_in_the_evaluation_and_the_sweep(server: OpenAIServer, misbehaviour: dict[str, Any],
                                                                      says: str) -> None:
    server.configure(**misbehaviour)
    with httpx.Client(timeout=5) as client:
        answer = stream_chat(client, server.url, BODY, case_id="c1")
    assert answer.error == says, answer
    # The sweep's sample of that request is an error, not a success.
    sample = Sample(phase="steady", status=answer.http_status, ttft_ms=answer.ttft_ms, total_ms=answer.latency_ms,
                    error=answer.error)
    assert not sample.ok


@pytest.mark.parametrize(("misbehaviour", "says"), [pytest.param(m, s, id=i) for i, m, s in BROKEN[:4]])
def test_the_evaluator_reports_no_answer_for_a_broken_stream(server: OpenAIServer, misbehaviour: dict[str, Any],
                                                            says: str) -> None:
    server.configure(**misbehaviour)
    endpoint = EndpointSettings(name="kimi-test", url=server.url, served_model_name=SERVED)
    case = EvalCase.model_validate({"id": "hello", "kind": "coding", "messages": [{"role": "user", "content": "Say hello."}],
                                    "checks": {"regex": ["hello"]}})
    (answer,) = HttpEvaluator().run(endpoint, [case], concurrency=1, timeout=5)
    assert answer.error == says


def test_the_readiness_client_agrees_on_a_cut_stream(server: OpenAIServer) -> None:
    server.configure(cut_after_tokens=1)
    endpoint = EndpointSettings(name="kimi-test", url=server.url, served_model_name=SERVED)
    result = HttpEndpointClient(timeout=5.0, connect_timeout=2.0).readiness(endpoint)
    assert not result.ok and result.failure_kind == "no_finish_reason"


def test_vllm_06_prefix_cache_gauge_is_read_when_the_counters_are_absent(server: OpenAIServer) -> None:
    server.configure(prefix_hit_rate_gauge=True)
    long_prompt = {**BODY, "messages": [{"role": "user", "content": " ".join(["shared prefix words"] * 40)}]}
    with httpx.Client(timeout=5) as client:
        for _ in range(2):
            assert stream_chat(client, server.url, long_prompt).error is None
        text = client.get(server.url + "/metrics").text
    assert "vllm:gpu_prefix_cache_hit_rate" in text and "prefix_cache_hits" not in text
    endpoint = EndpointSettings(name="kimi-test", url=server.url, served_model_name=SERVED)
    snapshot = HttpEndpointClient(timeout=5.0).metrics(endpoint)
    assert snapshot.prefix_cache_hits is None and snapshot.prefix_cache_queries is None
    assert snapshot.prefix_cache_hit_rate is not None and 0.0 < snapshot.prefix_cache_hit_rate <= 1.0
    # The sweep's sampler falls back to the gauge for a level's hit rate.
    sampler = _Sampler(lambda: snapshot, interval=1.0)
    sampler.sample_once()
    assert sampler.hit_rate() == snapshot.prefix_cache_hit_rate


def test_the_gauge_is_averaged_over_engines_and_the_counters_win_when_present() -> None:
    gauge_only = (
        "# TYPE vllm:gpu_prefix_cache_hit_rate gauge\n"
        'vllm:gpu_prefix_cache_hit_rate{engine="0",model_name="Kimi-K3"} 0.5\n'
        'vllm:gpu_prefix_cache_hit_rate{engine="1",model_name="Kimi-K3"} 0.7\n'
    )
    assert parse_metrics(gauge_only).prefix_cache_hit_rate == pytest.approx(0.6)
    both = gauge_only + (
        "# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total 1\n"
        "# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total 4\n"
    )
    assert parse_metrics(both).prefix_cache_hit_rate == pytest.approx(0.25)


def test_a_stopped_evaluation_cuts_its_stream_and_sends_no_further_case(server: OpenAIServer) -> None:
    """A stop (the deployment moved on elsewhere) ends the run at the next token, not when the answers would."""
    server.configure(token_delay=0.5)  # 16 tokens: eight seconds a case, and the set is long
    endpoint = EndpointSettings(name="kimi-test", url=server.url, served_model_name=SERVED)
    cases = [EvalCase.model_validate({"id": f"c{n}", "kind": "coding", "messages": [{"role": "user", "content": "Hi."}],
                                      "checks": {"regex": ["hello"]}}) for n in range(20)]
    stop = threading.Event()
    kept: list[str] = []

    class Ledger:
        def sent(self) -> None:
            kept.append("sent")
            stop.set()  # the stop comes while the first case streams

        def settled(self, kind: Counted) -> None:
            kept.append(kind)

    answers = HttpEvaluator().run(endpoint, cases, concurrency=1, timeout=600, ledger=Ledger(), stop=stop)
    assert [a.error for a in answers] == [STOPPED] * len(cases)
    assert kept == ["sent", "uncertain"]  # one case sent, cut mid-answer: the server may count it; none other sent
    assert server.wait_for(lambda s: s.running == 0 and s.served + s.aborted == 1), server.stats()
