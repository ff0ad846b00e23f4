"""Values of readiness completions and vLLM metrics snapshots (never prompt or answer text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FailureKind = Literal[
    "connection_refused", "timeout", "http_status", "empty_answer", "wrong_model", "no_finish_reason", "unhealthy", "protocol"
]


@dataclass(frozen=True)
class ReadinessResult:
    ok: bool
    http_status: int | None = None
    ttft_ms: float | None = None
    total_ms: float | None = None
    failure_kind: FailureKind | None = None
    error: str | None = None
    completion_tokens: int | None = None

    @property
    def summary(self) -> str:
        if self.ok:
            return f"answered: first token {self.ttft_ms:.0f} ms, complete {self.total_ms:.0f} ms"
        return f"failed ({self.failure_kind}): {self.error}"


@dataclass(frozen=True)
class MetricsSnapshot:
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    prefix_cache_hit_rate: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    # Raw cumulative counters, so a caller comparing two snapshots can get the hit rate of an interval.
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    # Requests the server finished since it started (every finish reason, abort included): two snapshots
    # minus the caller's own requests tell whether anyone else's requests reached the model in between.
    requests_finished: float | None = None
    # Time-to-first-token histogram as cumulative (upper bound, count) buckets, for the quantile of an interval.
    ttft_buckets: tuple[tuple[float, float], ...] = ()
    # HTTP answers of vLLM's API server (all, and 5xx): two snapshots give a window's error rate.
    http_requests: float | None = None
    http_errors: float | None = None
    # Overflow answers (429, and 503 where the server counts exact statuses), queue-time and end-to-end
    # histograms: what the metrics watch needs for the endpoint's objectives after go-live.
    http_rejects: float | None = None
    queue_buckets: tuple[tuple[float, float], ...] = ()
    e2e_buckets: tuple[tuple[float, float], ...] = ()
    # vLLM's request histograms (prompt and generated tokens per request) and the multimodal cache's queried
    # items: production's traffic mix, read without any payload (bot.domain.traffic_mix).
    prompt_buckets: tuple[tuple[float, float], ...] = ()
    generation_buckets: tuple[tuple[float, float], ...] = ()
    image_items: float | None = None

    @property
    def idle(self) -> bool:
        return (self.running or 0) == 0 and (self.waiting or 0) == 0
