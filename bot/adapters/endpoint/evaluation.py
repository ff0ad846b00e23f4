"""Sends chat completions for the model and traffic gates and reports what came back, timed.

One streamed request (:func:`stream_chat`) collects the answer text, tool calls,
an explicit refusal, the finish reason and token usage, and measures time to
first token and total time. As in the readiness client, an error event in the
stream (either of vLLM's shapes) and a stream that ends without a finish reason
or without ``data: [DONE]`` (a cut connection) are failures, never answers. :class:`HttpEvaluator` runs the evaluation set's
cases through it with a bounded number in flight. The text is handed to the
domain for scoring and is never logged here.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import SSEError, connect_sse

from bot.adapters.endpoint.tls import tls_context
from bot.config import EndpointSettings
from bot.domain.evaluation import Answer, EvalCase, ToolCall
from bot.domain.own_requests import OwnLedger, counted


@dataclass
class _Partial:
    """Accumulates streamed deltas; tool calls arrive in pieces keyed by index."""

    content: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    tools: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    ttft_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def take(self, chunk: dict[str, Any], elapsed_ms: float) -> None:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or choice.get("message") or {}
            produced = False
            for key in ("content", "reasoning_content", "reasoning"):
                text = delta.get(key)
                if text:
                    produced = True
                    if key == "content":
                        self.content.append(text)
            if delta.get("refusal"):
                self.refusal.append(delta["refusal"])
                produced = True
            for call in delta.get("tool_calls") or []:
                produced = True
                slot = self.tools.setdefault(int(call.get("index", len(self.tools))), {"name": "", "arguments": ""})
                fn = call.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            if produced and self.ttft_ms is None:
                self.ttft_ms = elapsed_ms
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def answer(self, case_id: str, status: int, total_ms: float) -> Answer:
        return Answer(
            case_id=case_id,
            http_status=status,
            content="".join(self.content),
            tool_calls=tuple(ToolCall(t["name"], t["arguments"]) for _, t in sorted(self.tools.items())),
            refusal="".join(self.refusal) or None,
            finish_reason=self.finish_reason,
            ttft_ms=self.ttft_ms,
            latency_ms=total_ms,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
        )


def _error_message(response: httpx.Response) -> str:
    """vLLM's error body: ``{"error": {"message": …}}`` or ``{"object": "error", "message": …}``."""
    try:
        response.read()
        body = response.json()
    except (ValueError, httpx.HTTPError):
        return f"HTTP {response.status_code}"
    if isinstance(body, dict):
        err = body.get("error")
        message = err.get("message") if isinstance(err, dict) else body.get("message")
        if message:
            return f"HTTP {response.status_code}: {str(message)[:200]}"
    return f"HTTP {response.status_code}"


def _stream_error(chunk: dict[str, Any]) -> str | None:
    """An error sent as a stream event after the 200: ``{"error": {…}}`` (current vLLM) or the flat legacy shape."""
    error = chunk.get("error") or (chunk if chunk.get("object") == "error" else None)
    if not error:
        return None
    message = error.get("message") if isinstance(error, dict) else error
    return f"error during the stream: {str(message or 'no message')[:200]}"


STOPPED = "stopped: the run was abandoned"
"""The error of a request a stopped run cut mid-stream, or never sent."""


def stream_chat(client: httpx.Client, base_url: str, body: dict[str, Any], *, case_id: str = "",
                deadline: float | None = None, stop: threading.Event | None = None) -> Answer:
    """POST one streamed chat completion and return what came back, timed from the request's start.

    ``deadline`` bounds the whole request in seconds. The client's timeout only bounds each read,
    so a stream trickling one token just inside it would otherwise run for tokens × timeout. Once ``stop`` is
    set, the stream is cut at its next event (the server may still count it finished: an abort).
    """
    payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
    url = base_url.rstrip("/") + "/v1/chat/completions"
    start = time.perf_counter()

    def since() -> float:
        return (time.perf_counter() - start) * 1000.0

    partial = _Partial()
    try:
        with connect_sse(client, "POST", url, json=payload) as source:
            response = source.response
            if response.status_code != 200:
                return Answer(
                    case_id=case_id, http_status=response.status_code, error=_error_message(response), latency_ms=since()
                )
            done = False
            for event in source.iter_sse():
                if event.data.strip() == "[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(event.data)
                except ValueError:
                    return Answer(case_id=case_id, http_status=200, error="malformed stream chunk", latency_ms=since())
                if not isinstance(chunk, dict):
                    return Answer(case_id=case_id, http_status=200, error="a stream event is not a JSON object",
                                  latency_ms=since())
                failure = _stream_error(chunk)
                if failure is not None:
                    return Answer(case_id=case_id, http_status=200, error=failure, latency_ms=since())
                partial.take(chunk, since())
                if deadline is not None and since() > deadline * 1000.0:
                    return Answer(case_id=case_id, http_status=None, error="timed out", latency_ms=since())
                if stop is not None and stop.is_set():
                    return Answer(case_id=case_id, http_status=None, error=STOPPED, latency_ms=since())
            # A connection cut mid-answer ends the stream quietly: only a finish reason and [DONE] say it was whole.
            if partial.finish_reason is None:
                return Answer(case_id=case_id, http_status=200, error="the stream ended without a finish reason",
                              latency_ms=since())
            if not done:
                return Answer(case_id=case_id, http_status=200, error="the stream ended before data: [DONE]",
                              latency_ms=since())
    except httpx.TimeoutException:
        return Answer(case_id=case_id, http_status=None, error="timed out", latency_ms=since())
    except httpx.ConnectError:
        return Answer(case_id=case_id, http_status=None, error="connection refused", latency_ms=since())
    except (httpx.HTTPError, SSEError) as exc:
        return Answer(case_id=case_id, http_status=None, error=f"transport: {type(exc).__name__}", latency_ms=since())
    return partial.answer(case_id, 200, since())


class HttpEvaluator:
    """Runs evaluation cases against an endpoint's OpenAI-compatible API, at most ``concurrency`` at a time."""

    def __init__(self, *, timeout: float | None = None, transport: httpx.BaseTransport | None = None) -> None:
        self.timeout = timeout
        self.transport = transport

    def run(self, endpoint: EndpointSettings, cases: Sequence[EvalCase], *, concurrency: int, timeout: float,
            ledger: OwnLedger | None = None, stop: threading.Event | None = None) -> list[Answer]:
        """One :class:`Answer` per case, in the cases' order; ``ledger`` hears of each case before it is sent.

        Once ``stop`` is set, the cases not yet sent are answered :data:`STOPPED` without being sent.
        """
        limit = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

        def one(client: httpx.Client, case: EvalCase) -> Answer:
            if stop is not None and stop.is_set():
                return Answer(case_id=case.id, http_status=None, error=STOPPED, latency_ms=0.0)
            if ledger is not None:
                ledger.sent()
            answer = stream_chat(client, endpoint.url, case.request_body(endpoint.served_model_name), case_id=case.id,
                                 deadline=timeout, stop=stop)
            if ledger is not None:
                ledger.settled(counted(answer.http_status, complete=answer.error is None))
            return answer

        with (
            httpx.Client(timeout=self.timeout or timeout, limits=limit, transport=self.transport, verify=tls_context()) as client,
            ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="eval") as pool,
        ):
            futures = [pool.submit(one, client, case) for case in cases]
            return [f.result() for f in futures]
