"""The stand-in's serving state: admission, queueing, pacing and vLLM-named Prometheus metrics.

One :class:`Engine` per stand-in server. Request threads call :meth:`Engine.admit`
(which may queue or reject with the overflow status), then pace their tokens
through :meth:`Engine.first_token` / :meth:`Engine.next_token`, and always end with
:meth:`Engine.finish`. The metrics it exposes are real state, not canned text:
running and waiting counts, a time-to-first-token histogram fed by the requests
it served, prefix-cache hits and queries, and KV-cache usage that grows with the
tokens of the running requests.

Requests cost what they would on vLLM: the first token waits for the prefill of
every prompt token the prefix cache did not hold (and each image's encoder; with ``serial_prefill``, after the
prefills of the prompts admitted before it), each
later token for a decode step that slows as the context grows, and the KV cache
holds prompt and output tokens. Each finished request is observed in vLLM's
request histograms (``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens``,
``vllm:request_params_max_tokens``, vLLM's 1-2-5 buckets up to ``max_model_len``) and
each image in the multimodal cache counters (``vllm:mm_cache_queries``/``_hits``).

All waits go through one stop event so :meth:`Engine.stop` wakes every thread.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bot.sandbox.openai_answers import Behaviour, PrefixCache, Prompt

# vLLM v1's bucket boundaries for time to first token and end-to-end latency.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)
ENGINE_LABEL = "0"


def token_buckets(max_model_len: int) -> tuple[float, ...]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, … up to ``max_model_len``."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(out)
            out.append(float(value))
        exponent += 1


class Overflow(Exception):
    """More requests than ``max_running + max_waiting``: answer with the overflow status."""


class Stopped(Exception):
    """The stand-in is shutting down; the request is abandoned."""


@dataclass(frozen=True)
class EngineStats:
    """What the stand-in has done so far (for tests and the sandbox's status)."""

    running: int
    waiting: int
    served: int
    rejected: int
    aborted: int
    prefix_hits: int
    prefix_queries: int
    kv_usage: float
    scrapes: int  # reads of /metrics (a drain or a soak watching the server shows as these)


@dataclass
class Ticket:
    """One admitted request."""

    id: int
    arrived: float
    prompt_tokens: int
    model: str
    first_token_delay: float
    max_tokens: int | None = None
    generated: int = 0
    first_token_at: float | None = None


class Engine:
    def __init__(self, behaviour: Behaviour) -> None:
        self._cond = threading.Condition()
        self._behaviour = behaviour
        self._stopping = threading.Event()
        self._gate = threading.Event()
        self._gate.set()
        self._ids = itertools.count(1)
        self._running: dict[int, Ticket] = {}
        self._waiting = 0
        self._served = self._rejected = self._aborted = 0
        self._scrapes = 0
        self._prefix = PrefixCache(block_tokens=behaviour.prefix_block_tokens)
        self._hits = self._queries = self._prompt_tokens = self._generation_tokens = 0
        # vLLM creates a request_success series per finish reason at start, so the counter reads 0, not absent.
        self._finished: Tally[str] = Tally({reason: 0 for reason in ("abort", "length", "stop")})
        self._http: Tally[tuple[str, str, str]] = Tally()  # (handler, method, status class), as vLLM's instrumentator
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self._ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                               labels, buckets=TTFT_BUCKETS, registry=self.registry)
        self._e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                              labels, buckets=E2E_BUCKETS, registry=self.registry)
        self._queue = Histogram("vllm:request_queue_time_seconds",
                                "Histogram of time spent in WAITING phase for request.", labels,
                                buckets=E2E_BUCKETS, registry=self.registry)
        tokens = token_buckets(behaviour.max_model_len)
        self._prompt_hist = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", labels,
                                      buckets=tokens, registry=self.registry)
        self._generation_hist = Histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                                          labels, buckets=tokens, registry=self.registry)
        self._max_tokens_hist = Histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
                                          labels, buckets=tokens, registry=self.registry)
        self._images: set[str] = set()
        self._mm_hits = self._mm_queries = 0
        self._kv_floor = 0.0  # simulated KV-cache usage beyond what the running requests hold
        self._running_floor = 0  # simulated requests running beyond the real ones
        self._prefill_done = 0.0  # with serial prefill: when the last prefill admitted ends (monotonic)
        self.registry.register(_StateCollector(self))

    # -- behaviour -------------------------------------------------------------------------------------------

    @property
    def behaviour(self) -> Behaviour:
        with self._cond:
            return self._behaviour

    def configure(self, **changes: object) -> Behaviour:
        """Change behaviour fields atomically; unknown field names raise ``TypeError``."""
        with self._cond:
            self._behaviour = replace(self._behaviour, **changes)  # type: ignore[arg-type]
            self._prefix.block_tokens = self._behaviour.prefix_block_tokens
            self._cond.notify_all()  # a raised max_running lets queued requests in
            return self._behaviour

    def reset(self, behaviour: Behaviour) -> None:
        """Back to ``behaviour`` with an empty prefix cache (counters keep counting, like a live server)."""
        with self._cond:
            self._behaviour = behaviour
            self._prefix = PrefixCache(block_tokens=behaviour.prefix_block_tokens)
            self._cond.notify_all()

    def hold(self) -> None:
        """Admitted requests stop before their first token until :meth:`release`."""
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def stop(self) -> None:
        self._stopping.set()
        self._gate.set()
        with self._cond:
            self._cond.notify_all()

    # -- request lifecycle -----------------------------------------------------------------------------------

    def admit(self, prompt: Prompt, max_tokens: int | None = None) -> Ticket:
        """Take a running slot, queue for one, or raise :class:`Overflow` when the queue is full."""
        arrived = time.monotonic()
        with self._cond:
            b = self._behaviour
            # Queue behind requests already waiting (first come, first served), not only when slots are full.
            if b.max_running is not None and (len(self._running) >= b.max_running or self._waiting > 0):
                if self._waiting >= b.max_waiting:
                    self._rejected += 1
                    self._cond.notify_all()
                    raise Overflow(f"the endpoint is at capacity ({b.max_running} running, {self._waiting} queued)")
                self._waiting += 1
                self._cond.notify_all()
                try:
                    self._cond.wait_for(lambda: self._stopping.is_set() or self._has_slot())
                finally:
                    self._waiting -= 1
                if self._stopping.is_set():
                    raise Stopped()
                b = self._behaviour
            hits = self._prefix.lookup_and_fill(prompt.tokens)
            self._hits += hits
            self._queries += len(prompt.tokens)
            self._prompt_tokens += len(prompt.tokens)
            for image in prompt.images:
                self._mm_queries += 1
                self._mm_hits += image in self._images
                self._images.add(image)
            others = len(self._running)
            self._queue.labels(b.served_model, ENGINE_LABEL).observe(time.monotonic() - arrived)
            prefill = (len(prompt.tokens) - hits) * b.prefill_per_token + len(prompt.images) * b.prefill_per_image
            if b.serial_prefill:  # after the prefills admitted before it
                now = time.monotonic()
                start = max(now, self._prefill_done)
                self._prefill_done = start + prefill
                prefill = self._prefill_done - now
            ticket = Ticket(
                id=next(self._ids), arrived=arrived, prompt_tokens=len(prompt.tokens), model=b.served_model,
                first_token_delay=b.first_token_delay + b.ttft_per_running * others + prefill, max_tokens=max_tokens,
            )
            self._running[ticket.id] = ticket
            self._cond.notify_all()
            return ticket

    def _has_slot(self) -> bool:
        limit = self._behaviour.max_running
        return limit is None or len(self._running) < limit

    def _sleep(self, seconds: float) -> None:
        if seconds > 0 and self._stopping.wait(seconds):
            raise Stopped()

    def first_token(self, ticket: Ticket) -> None:
        """Wait until the first token is due (prefill time, saturation, a hold), then record its time."""
        self._sleep(ticket.first_token_delay)
        self._gate.wait()
        if self._stopping.is_set():
            raise Stopped()
        self._emitted(ticket)

    def next_token(self, ticket: Ticket) -> None:
        """Wait one decode step (slower as the context grows), then count the token."""
        b = self.behaviour
        self._sleep(b.token_delay + b.decode_per_kilotoken * (ticket.prompt_tokens + ticket.generated) / 1000)
        self._emitted(ticket)

    def _emitted(self, ticket: Ticket) -> None:
        now = time.monotonic()
        with self._cond:
            ticket.generated += 1
            self._generation_tokens += 1
            if ticket.first_token_at is None:
                ticket.first_token_at = now
                self._ttft.labels(ticket.model, ENGINE_LABEL).observe(now - ticket.arrived)

    def finish(self, ticket: Ticket, reason: str) -> None:
        """Free the slot; ``reason`` is the finish reason, or ``abort`` when the client went away."""
        now = time.monotonic()
        with self._cond:
            if self._running.pop(ticket.id, None) is None:
                return
            self._finished[reason] += 1
            if reason == "abort":
                self._aborted += 1
            else:
                self._served += 1
                self._e2e.labels(ticket.model, ENGINE_LABEL).observe(now - ticket.arrived)
            # vLLM observes the request histograms of every finished request, aborted ones included.
            self._prompt_hist.labels(ticket.model, ENGINE_LABEL).observe(ticket.prompt_tokens)
            self._generation_hist.labels(ticket.model, ENGINE_LABEL).observe(ticket.generated)
            if ticket.max_tokens is not None:
                self._max_tokens_hist.labels(ticket.model, ENGINE_LABEL).observe(ticket.max_tokens)
            self._cond.notify_all()

    def simulate(self, *, requests: int, errors: int = 0, rejects: int = 0, ttft: float = 0.05, queue: float = 0.0,
                 e2e: float = 1.0, kv_usage: float | None = None, prompt_tokens: int = 0, output_tokens: int = 0,
                 images: int = 0, running: int | None = None) -> None:
        """Count ``requests`` as if served in a moment, as a busy production server would between two scrapes.

        ``errors`` of them were answered 5xx and ``rejects`` 429 (the overflow answer); the others took ``ttft``
        seconds to the first token, ``queue`` in the queue and ``e2e`` in all. ``kv_usage`` holds the KV-cache
        gauge at least that high until set again (``0`` lets the running requests alone decide it). With
        ``prompt_tokens``/``output_tokens`` the served requests are that long in the request histograms, each
        carrying ``images`` images (distinct ones: cache misses); ``running`` holds the running gauge at least that
        high until set again. This is how a test shows a burn, a busy hour or a moved traffic mix, without sending
        thousands of requests.
        """
        model = self.behaviour.served_model
        served = max(0, requests - errors - rejects)
        with self._cond:
            for histogram, value in ((self._ttft, ttft), (self._queue, queue), (self._e2e, e2e)):
                _observe_many(histogram.labels(model, ENGINE_LABEL), value, served)
            self._finished["stop"] += served
            self._served += served
            self._rejected += rejects
            handler = "/v1/chat/completions"
            self._http[(handler, "POST", "2xx")] += served
            self._http[(handler, "POST", "5xx")] += errors
            self._http[(handler, "POST", "4xx")] += rejects
            if kv_usage is not None:
                self._kv_floor = kv_usage
            if running is not None:
                self._running_floor = running
            if prompt_tokens:
                _observe_many(self._prompt_hist.labels(model, ENGINE_LABEL), prompt_tokens, served)
                _observe_many(self._generation_hist.labels(model, ENGINE_LABEL), output_tokens, served)
            self._mm_queries += images * served

    # -- observation -----------------------------------------------------------------------------------------

    def count_http(self, handler: str, method: str, status: int) -> None:
        """One HTTP answer, for ``http_requests_total`` (vLLM counts every answer, errors included, this way)."""
        with self._cond:
            self._http[(handler, method, f"{status // 100}xx")] += 1

    def stats(self) -> EngineStats:
        with self._cond:
            return self._stats()

    def _stats(self) -> EngineStats:
        return EngineStats(
            running=len(self._running), waiting=self._waiting, served=self._served, rejected=self._rejected,
            aborted=self._aborted, prefix_hits=self._hits, prefix_queries=self._queries, kv_usage=self._kv_usage(),
            scrapes=self._scrapes,
        )

    def _kv_usage(self) -> float:
        held = sum(t.prompt_tokens + t.generated for t in self._running.values())
        return max(self._kv_floor, min(1.0, held / max(1, self._behaviour.kv_capacity_tokens)))

    def wait_for(self, predicate: Callable[[EngineStats], bool], timeout: float = 10.0) -> bool:
        """Block until ``predicate(stats)`` holds (tests use it instead of sleeping); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self._stats()), timeout=timeout)

    def metrics_text(self) -> bytes:
        text = generate_latest(self.registry)
        with self._cond:
            self._scrapes += 1
            self._cond.notify_all()  # for a wait_for on scrapes
        return text

    def _families(self) -> Iterator[Metric]:
        with self._cond:
            b = self._behaviour
            stats = self._stats()
            finished = dict(self._finished)
            http = dict(self._http)
            prompt_tokens, generation_tokens = self._prompt_tokens, self._generation_tokens
            mm = (self._mm_queries, self._mm_hits)
            running = max(stats.running, self._running_floor)
        labels = [b.served_model, ENGINE_LABEL]
        names = ["model_name", "engine"]
        legacy = b.legacy_metric_names

        def gauge(name: str, help_: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, help_, labels=names)
            family.add_metric(labels, value)
            return family

        def counter(name: str, help_: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, help_, labels=names)
            family.add_metric(labels, value)
            return family

        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", stats.waiting)
        kv_name = "vllm:gpu_cache_usage_perc" if legacy else "vllm:kv_cache_usage_perc"
        yield gauge(kv_name, "KV-cache usage. 1 means 100 percent usage.", stats.kv_usage)
        if b.prefix_hit_rate_gauge:
            # vLLM <= 0.6 had no prefix-cache counters, only this gauge.
            rate = stats.prefix_hits / stats.prefix_queries if stats.prefix_queries else 0.0
            yield gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", rate)
        else:
            prefix = "vllm:gpu_prefix_cache" if legacy else "vllm:prefix_cache"
            yield counter(f"{prefix}_queries", "Prefix cache queries, in terms of number of queried tokens.",
                          stats.prefix_queries)
            yield counter(f"{prefix}_hits", "Prefix cache hits, in terms of number of cached tokens.", stats.prefix_hits)
        yield counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.", mm[0])
        yield counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", mm[1])
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", prompt_tokens)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.", generation_tokens)
        success = CounterMetricFamily("vllm:request_success", "Count of successfully processed requests.",
                                      labels=[*names, "finished_reason"])
        for reason in sorted(finished):
            success.add_metric([*labels, reason], finished[reason])
        yield success
        # prometheus-fastapi-instrumentator's counter in vLLM's API server: the only place a 5xx answered before
        # the engine (an overloaded or broken server) shows up.
        answers = CounterMetricFamily("http_requests", "Total number of requests by method, status and handler.",
                                      labels=["handler", "method", "status"])
        for (handler, method, status), count in sorted(http.items()):
            answers.add_metric([handler, method, status], count)
        yield answers


def _observe_many(child: Histogram, value: float, times: int) -> None:
    """``times`` observations of ``value`` at once (prometheus-client observes one at a time)."""
    if times <= 0:
        return
    bounds: list[float] = child._upper_bounds
    index = bisect.bisect_left(bounds, value)
    child._buckets[index].inc(times)
    child._sum.inc(value * times)


class _StateCollector(Collector):
    """Exposes the engine's live state on each scrape."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        return self._engine._families()
