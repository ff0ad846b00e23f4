"""The local OpenAI-compatible stand-in speaks vLLM's wire format and behaves as configured.

The model and traffic gates are tested against it, so its own behaviours (tool calls,
JSON answers, refusals, saturation) are pinned here, and its chunk and body shapes are
compared with the recorded samples in ``protocol-samples/vllm``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from httpx_sse import connect_sse

from bot.sandbox.openai_server import OpenAIServer

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "protocol-samples" / "vllm"
SERVED = "Kimi-K3"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "minLength": 2}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
        },
    },
}


@pytest.fixture()
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(served_model=SERVED) as running:
        yield running
        running.release()


def body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": SERVED, "messages": [{"role": "user", "content": text}], **extra}


def stream(url: str, request: dict[str, Any]) -> tuple[list[dict[str, Any]], bool, float | None]:
    """The JSON events of a streamed answer, whether [DONE] came, and seconds to the first token."""
    events: list[dict[str, Any]] = []
    done = False
    first: float | None = None
    started = time.perf_counter()
    with httpx.Client(timeout=30) as client, connect_sse(client, "POST", f"{url}/v1/chat/completions",
                                                          json={**request, "stream": True}) as source:
        assert source.response.status_code == 200
        for event in source.iter_sse():
            if event.data == "[DONE]":
                done = True
                break
            chunk = json.loads(event.data)
            delta = (chunk["choices"] or [{}])[0].get("delta", {})
            if first is None and (delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content")):
                first = time.perf_counter() - started
            events.append(chunk)
    return events, done, first


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join((c["choices"][0]["delta"].get("content") or "") for c in events if c["choices"])


def test_stream_chunks_have_the_recorded_vllm_shape(server) -> None:
    recorded = [json.loads(line[6:]) for line in (SAMPLES / "openai_compat_chat_stream_recorded_nvidia_api_2024-09-30.sse")
                .read_text().splitlines() if line.startswith("data: {")]
    events, done, _ = stream(server.url, body("hello", stream_options={"include_usage": True}))

    assert done
    content_events = [e for e in events if e["choices"]]
    assert {frozenset(e) for e in content_events} == {frozenset(recorded[0])}
    assert set(content_events[1]["choices"][0]) == set(recorded[1]["choices"][0])
    assert set(content_events[-1]["choices"][0]) == set(recorded[-1]["choices"][0])  # stop_reason on the last
    assert content_events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert content_events[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(e["model"] == SERVED and e["object"] == "chat.completion.chunk" for e in events)
    usage = events[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(content_events) - 2
    assert text_of(events) == "Ready to serve."


def test_non_streamed_answer_has_the_recorded_vllm_shape(server) -> None:
    recorded = json.loads((SAMPLES / "vllm_chat_completion_nonstream_llm-d_example.json").read_text())

    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body("hello")).json()

    assert set(answer) == set(recorded)
    assert set(answer["choices"][0]) == set(recorded["choices"][0])
    assert set(answer["choices"][0]["message"]) == set(recorded["choices"][0]["message"])
    assert set(answer["usage"]) == set(recorded["usage"])
    assert answer["choices"][0]["message"]["content"] == "Ready to serve."


def test_unknown_model_gets_vllms_not_found_body(server) -> None:
    response = httpx.post(f"{server.url}/v1/chat/completions", json={**body("hi"), "model": "gpt-4"})

    assert response.status_code == 404
    assert response.json() == {"error": {"message": "The model `gpt-4` does not exist.", "type": "NotFoundError",
                                         "param": "model", "code": 404}}


def test_tool_call_when_the_prompt_names_the_tool(server) -> None:
    events, done, _ = stream(server.url, body("What is the weather in Paris? Use get_weather.", tools=[WEATHER]))

    calls = [c for e in events if e["choices"] for c in e["choices"][0]["delta"].get("tool_calls") or []]
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["id"].startswith("chatcmpl-tool-")
    arguments = json.loads("".join(c["function"].get("arguments") or "" for c in calls))
    jsonschema.validate(arguments, WEATHER["function"]["parameters"])
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert done


def test_no_tool_call_unless_asked_and_none_after_the_tool_answered(server) -> None:
    plain = httpx.post(f"{server.url}/v1/chat/completions", json=body("Say hello.", tools=[WEATHER])).json()
    forced = httpx.post(f"{server.url}/v1/chat/completions",
                        json=body("Say hello.", tools=[WEATHER], tool_choice="required")).json()
    after = httpx.post(f"{server.url}/v1/chat/completions", json={
        "model": SERVED, "tools": [WEATHER],
        "messages": [{"role": "user", "content": "Use get_weather for Paris"},
                     {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function",
                      "function": {"name": "get_weather", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": "t1", "content": "18 C"}],
    }).json()

    assert plain["choices"][0]["message"]["tool_calls"] == [] and plain["choices"][0]["finish_reason"] == "stop"
    assert forced["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert after["choices"][0]["message"]["tool_calls"] == []


def test_json_answers_follow_the_requested_schema(server) -> None:
    schema = {"type": "object", "properties": {"language": {"type": "string"}, "lines": {"type": "integer", "minimum": 3}},
              "required": ["language", "lines"]}
    with_schema = {"type": "json_schema", "json_schema": {"name": "summary", "schema": schema}}

    events, _, _ = stream(server.url, body("Summarise this file", response_format=with_schema))
    plain_json = httpx.post(f"{server.url}/v1/chat/completions",
                            json=body("Summarise", response_format={"type": "json_object"})).json()

    jsonschema.validate(json.loads(text_of(events)), schema)
    assert isinstance(json.loads(plain_json["choices"][0]["message"]["content"]), dict)
    server.configure(honour_response_format=False)
    ignored, _, _ = stream(server.url, body("Summarise this file", response_format=with_schema))
    with pytest.raises(ValueError):
        json.loads(text_of(ignored))


def test_refusal_on_the_marker_or_a_configured_pattern(server) -> None:
    server.configure(refusal_patterns=(r"\bmalware\b",))

    marked, _, _ = stream(server.url, body("[refuse] tell me a secret"))
    patterned, _, _ = stream(server.url, body("write malware for me"))
    normal, _, _ = stream(server.url, body("write a sort function"))

    assert text_of(marked) == text_of(patterned) == "I'm sorry, but I can't help with that."
    assert text_of(normal) == "Ready to serve."


def test_configured_replies_and_max_tokens(server) -> None:
    server.configure(replies=((r"fizzbuzz", "def fizzbuzz(n): return n"),))

    matched, _, _ = stream(server.url, body("Write fizzbuzz in Python"))
    cut, _, _ = stream(server.url, body("Write fizzbuzz in Python", max_tokens=2))

    assert text_of(matched) == "def fizzbuzz(n): return n"
    assert text_of(cut) == "def fizzbuzz(n):"
    assert cut[-1]["choices"][0]["finish_reason"] == "length"


def test_saturation_first_token_latency_grows_with_concurrency(server) -> None:
    server.configure(ttft_per_running=0.2)
    server.hold()
    firsts: list[float] = []

    def one(index: int) -> None:
        firsts.append(stream(server.url, body(f"request {index}"))[2] or 0.0)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    assert server.wait_for(lambda s: s.running == 3)
    server.release()
    for thread in threads:
        thread.join(timeout=30)

    # The third admitted request waited for two others: at least 0.4 s to its first token.
    assert max(firsts) >= 0.4


def test_overflow_status_past_running_and_queue_limits(server) -> None:
    server.configure(max_running=1, max_waiting=0, overflow_status=503)
    server.hold()
    thread = threading.Thread(target=stream, args=(server.url, body("occupies the only slot")))
    thread.start()
    assert server.wait_for(lambda s: s.running == 1)

    rejected = httpx.post(f"{server.url}/v1/chat/completions", json=body("one too many"))

    assert rejected.status_code == 503
    assert "capacity" in rejected.json()["error"]["message"]
    server.release()
    thread.join(timeout=30)
    assert server.stats().rejected == 1 and server.stats().served == 1


def test_unknown_behaviour_field_is_refused(server) -> None:
    with pytest.raises(TypeError):
        server.configure(no_such_setting=True)


def test_answers_are_deterministic(server) -> None:
    request = body("What is the weather in Oslo? Use get_weather.", tools=[WEATHER])
    first = httpx.post(f"{server.url}/v1/chat/completions", json=request).json()
    second = httpx.post(f"{server.url}/v1/chat/completions", json=request).json()

    assert first["choices"][0]["message"]["tool_calls"][0]["function"] == \
        second["choices"][0]["message"]["tool_calls"][0]["function"]


def test_prompt_longer_than_the_context_window_gets_vllms_400(server) -> None:
    server.configure(max_model_len=64)

    response = httpx.post(f"{server.url}/v1/chat/completions", json=body("word " * 100))

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "input_tokens" and error["type"] == "BadRequestError"
    assert error["message"].startswith("This model's maximum context length is 64 tokens.")
    assert server.stats().served == 0


def test_a_long_prompt_waits_for_its_prefill_and_a_cached_prefix_does_not(server) -> None:
    server.configure(prefill_per_token=0.0002)  # 5,000 tokens/s: 2,000 fresh prompt tokens take 0.4 s
    document = " ".join(f"w{i}" for i in range(2000))

    _, _, fresh = stream(server.url, body(document + " first question"))
    _, _, short = stream(server.url, body("hello"))

    assert fresh is not None and fresh >= 0.4
    # The same document again: its blocks are in the prefix cache, so only the new tail is prefilled.
    assert server.stats().prefix_hits == 0
    stream(server.url, body(document + " second question"))
    assert server.stats().prefix_hits >= 1984
    assert short is not None


def test_output_length_costs_decode_steps_and_ignore_eos_runs_to_max_tokens(server) -> None:
    server.configure(token_delay=0.01)
    started = time.perf_counter()
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body("hi", max_tokens=40, ignore_eos=True),
                        timeout=30).json()

    assert answer["usage"]["completion_tokens"] == 40
    assert answer["choices"][0]["finish_reason"] == "length"
    assert time.perf_counter() - started >= 39 * 0.01  # 39 decode steps after the first token


def test_kv_cache_usage_holds_the_prompt_and_images_count_as_tokens(server) -> None:
    server.configure(kv_capacity_tokens=10_000)
    server.hold()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    request = {"model": SERVED, "messages": [{"role": "user", "content": [{"type": "text", "text": "w " * 1000}, image]}]}
    thread = threading.Thread(target=httpx.post, args=(f"{server.url}/v1/chat/completions",), kwargs={"json": request,
                                                                                                       "timeout": 30})
    thread.start()
    assert server.wait_for(lambda s: s.running == 1)

    # 1,000 words, the role marker and 256 image tokens of 10,000.
    assert 0.125 <= server.stats().kv_usage <= 0.13
    server.release()
    thread.join(timeout=30)


def test_metrics_expose_vllms_request_histograms_and_multimodal_counters(server) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    for _ in range(2):
        request = {"model": SERVED, "max_tokens": 5, "ignore_eos": True,
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "w " * 300}, image]}]}
        httpx.post(f"{server.url}/v1/chat/completions", json=request, timeout=30)

    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text)}

    for name in ("vllm:request_prompt_tokens", "vllm:request_generation_tokens", "vllm:request_params_max_tokens"):
        assert families[name].type == "histogram"
    samples = {(s.name, s.labels.get("le")): s.value for s in families["vllm:request_generation_tokens"].samples}
    assert samples[("vllm:request_generation_tokens_count", None)] == 2
    assert samples[("vllm:request_generation_tokens_bucket", "5.0")] == 2
    assert samples[("vllm:request_generation_tokens_bucket", "2.0")] == 0
    prompt = {(s.name, s.labels.get("le")): s.value for s in families["vllm:request_prompt_tokens"].samples}
    assert prompt[("vllm:request_prompt_tokens_bucket", "500.0")] == 0 and prompt[("vllm:request_prompt_tokens_bucket",
                                                                                   "1000.0")] == 2
    mm = {s.name: s.value for f in ("vllm:mm_cache_queries", "vllm:mm_cache_hits") for s in families[f].samples}
    assert families["vllm:mm_cache_queries"].type == "counter"
    assert (mm["vllm:mm_cache_queries_total"], mm["vllm:mm_cache_hits_total"]) == (2, 1)  # the same image twice
