"""The endpoint client: readiness through a real streamed completion, vLLM metrics, and drain.

A readiness completion asks ``GET /health``, then ``GET /v1/models`` (the served
model name must be listed), then streams ``POST /v1/chat/completions`` with a
tiny fixed prompt and reads the Server-Sent Events. It measures time to the
first generated token (answer or reasoning) and to the end, and requires answer
text, a finish reason, and chunks from the served model. Every failure comes
back as a :class:`~bot.domain.readiness.ReadinessResult` carrying its kind and a
one-line reason (with the server's own error message when it sent one); this
adapter does not raise for an unhealthy endpoint.

Prompts and answers are never stored or logged: only sizes and timings.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import SSEError, connect_sse

from bot.adapters.endpoint.kept import KeptClient
from bot.adapters.endpoint.metrics import PEAK_FAMILIES, MetricsUnavailable, scrape
from bot.adapters.endpoint.tls import tls_context
from bot.config import EndpointSettings
from bot.domain.readiness import FailureKind, MetricsSnapshot, ReadinessResult
from bot.logs import logger_for

log = logger_for(__name__)

READINESS_PROMPT = "Reply with the single word: ready."
REASON_LIMIT = 300
# Idle connections kept for re-use across probe runs (a probe run asks up to KIMI_PROBE_CONCURRENCY endpoints at once).
MAX_KEEPALIVE = 64


def error_message(response: httpx.Response) -> str:
    """The server's error text: vLLM's ``{"error": {"message"}}``, the older flat shape, or the raw body."""
    status = f"HTTP {response.status_code}"
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip()
        return f"{status}: {text.splitlines()[0][:REASON_LIMIT]}" if text else f"{status} {response.reason_phrase}".strip()
    message: Any = None
    if isinstance(body, Mapping):
        error = body.get("error")
        if isinstance(error, Mapping):
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        message = message or body.get("message") or body.get("detail")
    if not message:
        return f"{status}: {json.dumps(body)[:REASON_LIMIT]}"
    return f"{status}: {str(message).strip()[:REASON_LIMIT]}"


def _url(endpoint: EndpointSettings, path: str) -> str:
    return f"{endpoint.url.rstrip('/')}/{path}"


@dataclass
class _Stream:
    """What one streamed answer showed: sizes and timings only."""

    ttft_s: float | None = None
    content_chars: int = 0
    reasoning_chars: int = 0
    tool_calls: int = 0
    finish_reason: str | None = None
    completion_tokens: int | None = None
    done: bool = False

    def take(self, chunk: Mapping[str, Any], elapsed: float) -> None:
        usage = chunk.get("usage")
        if isinstance(usage, Mapping) and isinstance(usage.get("completion_tokens"), int):
            self.completion_tokens = usage["completion_tokens"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content = delta.get("content") or ""
            # vLLM's reasoning parser puts thinking in reasoning_content (newer releases: reasoning).
            reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
            calls = delta.get("tool_calls") or []
            if (content or reasoning or calls) and self.ttft_s is None:
                self.ttft_s = elapsed
            self.content_chars += len(content)
            self.reasoning_chars += len(reasoning)
            self.tool_calls += len(calls)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])


class _Failed(Exception):
    def __init__(self, kind: FailureKind, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.kind, self.reason, self.status = kind, reason, status


class HttpEndpointClient:
    """Implements :class:`bot.services.ports.EndpointClient` over httpx (synchronous).

    ``timeout`` bounds each read and the whole completion; ``connect_timeout`` the TCP
    connect. ``extra_body`` is merged into the completion request (e.g. a chat-template
    switch that turns thinking off). ``sleep`` and ``clock`` drive :meth:`drain`'s
    polling and deadline, so tests can run it without waiting.
    """

    def __init__(
        self,
        *,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        max_tokens: int = 512,
        prompt: str = READINESS_PROMPT,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        drain_poll_seconds: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_tokens = max_tokens
        self.prompt = prompt
        self.extra_body = dict(extra_body or {})
        self.headers = dict(headers or {})
        self.drain_poll_seconds = drain_poll_seconds
        self._sleep = sleep
        self._clock = clock
        self._transport = transport
        self._kept = KeptClient(lambda: httpx.Client(
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            headers=self.headers,
            transport=self._transport,
            follow_redirects=False,
            verify=tls_context(),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=MAX_KEEPALIVE),
        ))
        # Dropped without close(), its kept-alive connections close with it, not whenever the sockets are collected.
        weakref.finalize(self, self._kept.close)

    def _client(self) -> httpx.Client:
        """The one httpx client of this adapter (so of the process), made on first use and kept open.

        Building one loads the CA certificates (~30 ms of CPU); probes of many endpoints at once share its
        connection pool (httpx's client is safe across threads). No caller closes it: only :meth:`close`.
        """
        return self._kept.get()

    def close(self) -> None:
        """Close the shared client (process end); the next call makes a new one."""
        self._kept.close()

    # -- readiness -------------------------------------------------------------------------------------------

    def readiness(self, endpoint: EndpointSettings) -> ReadinessResult:
        """One readiness completion; failures are results with a kind and a reason, never exceptions."""
        try:
            client = self._client()
            self._health(client, endpoint)
            self._models(client, endpoint)
            result = self._complete(client, endpoint)
        except _Failed as failed:
            log.info("readiness completion against %s failed (%s): %s", endpoint.name, failed.kind, failed.reason)
            return ReadinessResult(ok=False, http_status=failed.status, failure_kind=failed.kind, error=failed.reason)
        except httpx.ConnectError as exc:
            text = str(exc) or type(exc).__name__
            if "refused" in text.lower():
                reason = (
                    f"connection refused by {endpoint.url} (nothing listening; vLLM refuses connections while the model loads)"
                )
            else:
                reason = f"cannot connect to {endpoint.url}: {text[:REASON_LIMIT]}"
            return ReadinessResult(ok=False, failure_kind="connection_refused", error=reason)
        except httpx.ConnectTimeout:
            return ReadinessResult(
                ok=False, failure_kind="timeout", error=f"no connection to {endpoint.url} within {self.connect_timeout:g} s"
            )
        except httpx.TimeoutException:
            return ReadinessResult(
                ok=False, failure_kind="timeout", error=f"no answer from {endpoint.url} within {self.timeout:g} s"
            )
        except httpx.InvalidURL as exc:
            return ReadinessResult(
                ok=False, failure_kind="protocol", error=f"the endpoint URL {endpoint.url!r} is invalid: {exc}"
            )
        except (httpx.TransportError, SSEError) as exc:
            return ReadinessResult(
                ok=False,
                failure_kind="protocol",
                error=f"broken exchange with {endpoint.url}: {str(exc)[:REASON_LIMIT] or type(exc).__name__}",
            )
        log.info(
            "readiness completion against %s: first token %.0f ms, complete %.0f ms, %s completion tokens",
            endpoint.name,
            result.ttft_ms,
            result.total_ms,
            result.completion_tokens,
        )
        return result

    def _health(self, client: httpx.Client, endpoint: EndpointSettings) -> None:
        response = client.get(_url(endpoint, "health"))
        if response.status_code != 200:
            detail = "" if not response.content else f" ({error_message(response)})"
            raise _Failed("unhealthy", f"/health answered HTTP {response.status_code}{detail}", response.status_code)

    def _models(self, client: httpx.Client, endpoint: EndpointSettings) -> None:
        response = client.get(_url(endpoint, "v1/models"))
        if response.status_code != 200:
            raise _Failed("http_status", f"/v1/models: {error_message(response)}", response.status_code)
        try:
            data = response.json().get("data") or []
            served = [str(card["id"]) for card in data]
        except (ValueError, AttributeError, TypeError, KeyError):
            raise _Failed("protocol", "/v1/models did not answer an OpenAI model list", response.status_code) from None
        if endpoint.served_model_name not in served:
            listed = ", ".join(served) or "nothing"
            raise _Failed("wrong_model", f"{endpoint.served_model_name!r} is not served here; /v1/models lists {listed}", 200)

    def _request(self, endpoint: EndpointSettings) -> dict[str, Any]:
        return {
            "model": endpoint.served_model_name,
            "messages": [{"role": "user", "content": self.prompt}],
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **self.extra_body,
        }

    def _complete(self, client: httpx.Client, endpoint: EndpointSettings) -> ReadinessResult:
        started = time.perf_counter()
        seen = _Stream()
        with connect_sse(client, "POST", _url(endpoint, "v1/chat/completions"), json=self._request(endpoint)) as source:
            response = source.response
            if response.status_code != 200:
                response.read()
                raise _Failed("http_status", f"/v1/chat/completions: {error_message(response)}", response.status_code)
            for event in source.iter_sse():
                elapsed = time.perf_counter() - started
                if event.data.strip() == "[DONE]":
                    seen.done = True
                    break
                self._take(event.data, seen, endpoint, elapsed)
                if elapsed > self.timeout:
                    raise _Failed("timeout", f"the answer did not finish within {self.timeout:g} s", 200)
        total = time.perf_counter() - started
        self._judge(seen)
        return ReadinessResult(
            ok=True,
            http_status=200,
            ttft_ms=(seen.ttft_s or total) * 1000,
            total_ms=total * 1000,
            completion_tokens=seen.completion_tokens,
        )

    def _take(self, data: str, seen: _Stream, endpoint: EndpointSettings, elapsed: float) -> None:
        try:
            chunk = json.loads(data)
        except ValueError:
            raise _Failed("protocol", "a stream event is not JSON", 200) from None
        if not isinstance(chunk, Mapping):
            raise _Failed("protocol", "a stream event is not a JSON object", 200)
        error = chunk.get("error") or (chunk if chunk.get("object") == "error" else None)
        if error:
            # vLLM reports errors raised after the stream started as an event, not a status.
            message = error.get("message") if isinstance(error, Mapping) else str(error)
            code = error.get("code") if isinstance(error, Mapping) and isinstance(error.get("code"), int) else 200
            raise _Failed("http_status", f"error during the stream: {str(message)[:REASON_LIMIT]}", code)
        model = chunk.get("model")
        if model and model != endpoint.served_model_name:
            raise _Failed("wrong_model", f"the answer came from model {model!r}, not {endpoint.served_model_name!r}", 200)
        seen.take(chunk, elapsed)

    def _judge(self, seen: _Stream) -> None:
        if seen.content_chars == 0:
            if seen.reasoning_chars and seen.finish_reason == "length":
                raise _Failed("empty_answer", f"only reasoning before max_tokens={self.max_tokens} ran out; no answer text", 200)
            raise _Failed("empty_answer", f"the answer had no text (finish reason {seen.finish_reason or 'none'})", 200)
        if seen.finish_reason is None:
            raise _Failed("no_finish_reason", "the stream ended without a finish reason", 200)
        if not seen.done:
            raise _Failed("protocol", "the stream ended before data: [DONE]", 200)

    # -- metrics and drain -----------------------------------------------------------------------------------

    def metrics(self, endpoint: EndpointSettings) -> MetricsSnapshot:
        """One scrape of ``/metrics``; raises :class:`MetricsUnavailable` with the reason."""
        return scrape(self._client(), _url(endpoint, "metrics"))

    def peak_metrics(self, endpoint: EndpointSettings) -> MetricsSnapshot:
        """One scrape of ``/metrics`` for a sweep's peaks only: queue, KV cache and prefix cache (the rest None)."""
        return scrape(self._client(), _url(endpoint, "metrics"), PEAK_FAMILIES)

    def drain(self, endpoint: EndpointSettings, timeout_seconds: float,
              stop: threading.Event | None = None) -> tuple[bool, MetricsSnapshot | None]:
        """Poll ``/metrics`` until nothing runs or waits, the deadline, or ``stop``; ``(drained, last snapshot)``.

        Unreadable metrics never count as drained: an empty queue must be seen, not assumed.
        """
        deadline = self._clock() + timeout_seconds
        last: MetricsSnapshot | None = None
        while True:
            try:
                last = self.metrics(endpoint)
                if last.running is not None and last.waiting is not None and last.idle:
                    return True, last
            except MetricsUnavailable as exc:
                log.warning("drain of %s: %s", endpoint.name, exc)
            remaining = deadline - self._clock()
            if remaining <= 0:
                return False, last
            pause = min(self.drain_poll_seconds, remaining)
            if stop is None:
                self._sleep(pause)
            elif stop.wait(pause):  # the deployment moved on elsewhere (a cancel): waiting longer helps nobody
                return False, last
