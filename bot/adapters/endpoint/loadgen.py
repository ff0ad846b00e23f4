"""The traffic gate's load generator: a bounded concurrency sweep against one endpoint.

For each prefix mode (shared, then unique) it warms the model, then measures
levels 1, 2, 4, … up to the plan's ceiling — each a steady interval (every
client sends its requests back to back) and a burst interval (all clients fire
at the same instant) — while a sampler thread reads ``/metrics``. It stops a
mode at the knee (after a few bisection steps), and the whole sweep when its
request budget or wall-time budget runs out: it always stops by itself.

What each request is comes from the :class:`~bot.domain.workload.Workload` it is
given (production's mix, or the fixed prompt): every level opens with the workload's
long-context tail, then cycles through its shapes (:mod:`.sweep_requests` makes them
into request bodies).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import httpx

from bot.adapters.endpoint.evaluation import stream_chat
from bot.adapters.endpoint.sweep_requests import chat_body
from bot.adapters.endpoint.tls import tls_context
from bot.config import EndpointSettings
from bot.domain.own_requests import Counted, OwnLedger, OwnRequests, counted
from bot.domain.readiness import MetricsSnapshot
from bot.domain.sweep import (
    LevelStats,
    MetricsPeak,
    Objectives,
    Phase,
    PrefixMode,
    Sample,
    SweepOutcome,
    SweepPlan,
    level_stats,
    next_level,
)
from bot.domain.workload import RequestShape, Workload, synthesise
from bot.logs import logger_for

log = logger_for(__name__)

MetricsReader = Callable[[EndpointSettings], MetricsSnapshot]


class _Budget:
    """Shared, thread-safe request and time budget of one sweep."""

    def __init__(self, max_requests: int, max_seconds: float, stop: threading.Event | None = None) -> None:
        self._left = max_requests
        self.deadline = time.monotonic() + max_seconds
        self.stop = stop
        self._lock = threading.Lock()
        self.used = 0

    def take(self) -> bool:
        with self._lock:
            if self._left <= 0 or time.monotonic() >= self.deadline or self.stopped:
                return False
            self._left -= 1
            self.used += 1
            return True

    @property
    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    @property
    def exhausted(self) -> str | None:
        if self.stopped:
            return "stopped: the run was abandoned"
        with self._lock:
            if self._left <= 0:
                return "request budget used up"
        if time.monotonic() >= self.deadline:
            return "time budget used up"
        return None


class _Sampler(threading.Thread):
    """Reads /metrics while a level runs and keeps the worst queue depth and KV usage."""

    def __init__(self, read: Callable[[], MetricsSnapshot], interval: float) -> None:
        super().__init__(daemon=True, name="sweep-metrics")
        self.read = read
        self.interval = interval
        self.stop_event = threading.Event()
        self.queue: float | None = None
        self.kv: float | None = None
        self.failures = 0
        self.first: MetricsSnapshot | None = None
        self.last: MetricsSnapshot | None = None

    def sample_once(self) -> None:
        try:
            snap = self.read()
        except Exception:  # a missing /metrics must not stop the sweep; the level reports "n/a"
            self.failures += 1
            return
        self.first = self.first or snap
        self.last = snap
        if snap.waiting is not None:
            self.queue = max(self.queue or 0.0, snap.waiting)
        if snap.kv_cache_usage is not None:
            self.kv = max(self.kv or 0.0, snap.kv_cache_usage)

    def hit_rate(self) -> float | None:
        """Prefix-cache hits over queries during this level only (the counters are cumulative).

        A vLLM without the counters (≤ 0.6) has only its hit-rate gauge: the last reading stands for the level.
        """
        if self.first is None or self.last is None:
            return None
        if self.last.prefix_cache_queries is None:
            return self.last.prefix_cache_hit_rate
        hits = (self.last.prefix_cache_hits, self.first.prefix_cache_hits)
        queries = (self.last.prefix_cache_queries, self.first.prefix_cache_queries)
        if None in hits or None in queries or queries[0] - queries[1] <= 0:  # type: ignore[operator]
            return None
        return (hits[0] - hits[1]) / (queries[0] - queries[1])  # type: ignore[operator]

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            self.sample_once()

    def finish(self) -> MetricsPeak:
        self.stop_event.set()
        self.join()
        self.sample_once()
        return MetricsPeak(queue_depth=self.queue, kv_cache_usage=self.kv, prefix_cache_hit_rate=self.hit_rate())


class HttpLoadGenerator:
    """Runs the sweep with one thread per simulated client over a shared httpx connection pool.

    ``metrics`` reads ``/metrics`` every ``metrics_interval`` seconds while a level runs; only its queue, KV-cache
    and prefix-cache readings are kept, so production passes the endpoint client's ``peak_metrics``.
    """

    def __init__(
        self,
        metrics: MetricsReader | None = None,
        *,
        metrics_interval: float = 0.05,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.metrics = metrics
        self.metrics_interval = metrics_interval
        self.transport = transport

    def sweep(
        self,
        endpoint: EndpointSettings,
        plan: SweepPlan,
        objectives: Objectives,
        on_level: Callable[[LevelStats], None] | None = None,
        ledger: OwnLedger | None = None,
        workload: Workload | None = None,
        stop: threading.Event | None = None,
    ) -> SweepOutcome:
        work = workload or synthesise(None, prompt_words=plan.prompt_words, max_tokens=plan.max_tokens,
                                      max_model_len=endpoint.max_model_len, multimodal=False, prod=False)
        budget = _Budget(plan.max_requests, plan.max_seconds, stop)
        started = time.monotonic()
        levels: list[LevelStats] = []
        stopped: str | None = None
        limits = httpx.Limits(max_connections=plan.ceiling + 1, max_keepalive_connections=plan.ceiling + 1)
        with httpx.Client(timeout=plan.request_timeout_seconds, limits=limits, transport=self.transport,
                          verify=tls_context()) as client:
            counter = _Counter(ledger, stop)
            for mode in plan.prefix_modes:
                self._warm(client, endpoint, plan, mode, counter, budget, work.cycle[0])
                tried: dict[int, bool] = {}
                while (concurrency := next_level(tried, plan.levels(), plan.refine_steps)) is not None:
                    if (stopped := budget.exhausted) is not None:
                        break
                    stats = self._level(client, endpoint, plan, objectives, mode, concurrency, counter, budget, work)
                    planned = concurrency * (plan.steady_requests_per_slot + plan.burst_rounds)
                    if budget.exhausted and stats.requests < planned:
                        # A level cut short by the budget measured less load than it names: drop it, never call it the knee.
                        stopped = budget.exhausted
                        break
                    levels.append(stats)
                    tried[concurrency] = not stats.broken
                    if on_level is not None:
                        on_level(stats)
                if stopped:
                    break
        return SweepOutcome(
            levels=levels, requests=budget.used, elapsed_seconds=time.monotonic() - started, stopped_early=stopped,
            own=counter.own,
        )

    # ------------------------------------------------------------------ internals
    def _send(self, client: httpx.Client, endpoint: EndpointSettings, plan: SweepPlan, mode: PrefixMode,
              counter: _Counter, phase: Phase, shape: RequestShape) -> Sample:
        body = chat_body(endpoint.served_model_name, shape, mode, counter.next())
        counter.sent()
        answer = stream_chat(client, endpoint.url, body, deadline=plan.request_timeout_seconds, stop=counter.stop)
        counter.count(counted(answer.http_status, complete=answer.error is None))
        return Sample(phase=phase, status=answer.http_status, ttft_ms=answer.ttft_ms, total_ms=answer.latency_ms,
                      error=answer.error, tail=shape.tail is not None)

    def _warm(
        self,
        client: httpx.Client,
        endpoint: EndpointSettings,
        plan: SweepPlan,
        mode: PrefixMode,
        counter: _Counter,
        budget: _Budget,
        shape: RequestShape,
    ) -> None:
        for _ in range(plan.warmup_requests):
            if not budget.take():
                return
            self._send(client, endpoint, plan, mode, counter, "warmup", shape)

    def _level(
        self,
        client: httpx.Client,
        endpoint: EndpointSettings,
        plan: SweepPlan,
        objectives: Objectives,
        mode: PrefixMode,
        concurrency: int,
        counter: _Counter,
        budget: _Budget,
        work: Workload,
    ) -> LevelStats:
        samples: list[Sample] = []
        lock = threading.Lock()
        order = itertools.count()  # the level's request index: the tail first, then the cycle

        def next_shape() -> RequestShape:
            with lock:
                return work.shape(next(order))
        metrics = self.metrics
        sampler = _Sampler(lambda: metrics(endpoint), self.metrics_interval) if metrics is not None else None
        if sampler is not None:
            sampler.sample_once()  # the baseline of the cumulative prefix-cache counters
            sampler.start()

        def record(sample: Sample) -> None:
            with lock:
                samples.append(sample)

        steady_end = min(time.monotonic() + plan.steady_seconds, budget.deadline)

        def steady_client() -> None:
            for _ in range(plan.steady_requests_per_slot):
                if time.monotonic() >= steady_end or not budget.take():
                    return
                record(self._send(client, endpoint, plan, mode, counter, "steady", next_shape()))

        _run_threads(concurrency, steady_client)
        for _ in range(plan.burst_rounds):
            barrier = threading.Barrier(concurrency)

            # The barrier is bound as a default: each round's threads finish (joined) before the next round's barrier.
            def burst_client(barrier: threading.Barrier = barrier) -> None:
                # Everyone waits at the barrier, so all prefills hit the server at one instant.
                allowed = budget.take()
                try:
                    barrier.wait(timeout=plan.request_timeout_seconds)
                except threading.BrokenBarrierError:
                    return
                if allowed:
                    record(self._send(client, endpoint, plan, mode, counter, "burst", next_shape()))

            _run_threads(concurrency, burst_client)
        peak = sampler.finish() if sampler is not None else MetricsPeak()
        stats = level_stats(concurrency, mode, samples, peak, objectives)
        log.info(
            "sweep level %s (%s prefixes): %d requests, broken: %s",
            concurrency,
            mode,
            stats.requests,
            "; ".join(stats.broken) or "none",
        )
        return stats


class _Counter:
    """Numbers the sweep's prompts and tallies its requests as the model's finished counter sees them."""

    def __init__(self, ledger: OwnLedger | None = None, stop: threading.Event | None = None) -> None:
        self._n = 0
        self._lock = threading.Lock()
        self._ledger = ledger
        self.stop = stop  # a stopped sweep cuts its streams under way
        self.own = OwnRequests()

    def next(self) -> int:
        with self._lock:
            self._n += 1
            return self._n

    def sent(self) -> None:
        """A request is about to leave: the ledger hears of it first, so a crash cannot lose it."""
        if self._ledger is not None:
            self._ledger.sent()

    def count(self, kind: Counted) -> None:
        with self._lock:
            self.own = self.own.plus(kind)
        if self._ledger is not None:
            self._ledger.settled(kind)


def _run_threads(count: int, target: Callable[[], None]) -> None:
    threads = [threading.Thread(target=target, daemon=True, name=f"sweep-client-{i}") for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
