"""The traffic gate's concurrency sweep: objectives, per-level statistics, the knee and the proposed limits.

Pure. The load generator measures each concurrency level (1, 2, 4, … up to a
ceiling) once with shared prompt prefixes and once with unique ones; this module
turns the raw samples of a level into :class:`LevelStats`, finds the knee — the
first level that breaks a service objective — and proposes HyperPod request
limits below it. The plan follows the worse of the two prefix modes, so it never
depends on a friendly prefix cache.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.domain.evaluation import percentile
from bot.domain.own_requests import OwnRequests

PrefixMode = Literal["shared", "unique"]
Phase = Literal["warmup", "steady", "burst"]
REJECT_STATUSES = frozenset({429, 503})
DEFAULT_QUEUE_WAIT_MS = 2000.0  # queue sizing when no TTFT objective is set


class Objectives(BaseModel):
    """Service objectives; a level breaking any one of them is the knee."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_p99_ms: float | None = Field(default=None, gt=0, description="unset: the endpoint's ttft_objective_ms")
    completion_p99_ms: float = Field(default=30_000, gt=0, description="p99 of a whole completion")
    reject_rate: float = Field(default=0.01, ge=0, le=1, description="429/503 share of requests")
    error_rate: float = Field(default=0.01, ge=0, le=1, description="other failures (5xx, timeouts, broken streams)")
    queue_depth: float = Field(default=8, ge=0, description="requests waiting in vLLM (num_requests_waiting)")
    kv_cache_usage: float = Field(default=0.95, gt=0, le=1, description="peak KV-cache usage (0-1)")


class SweepPlan(BaseModel):
    """How the sweep runs; every bound is finite so the sweep stops by itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ceiling: int = Field(default=64, ge=1, le=4096, description="highest concurrency tried")
    warmup_requests: int = Field(default=2, ge=0, description="requests before each prefix mode, not measured")
    steady_requests_per_slot: int = Field(default=3, ge=1, description="steady requests per concurrent client")
    steady_seconds: float = Field(default=60, gt=0, description="longest steady interval of one level")
    burst_rounds: int = Field(default=1, ge=0, description="times all clients fire at the same instant")
    refine_steps: int = Field(default=3, ge=0, description="bisections between the last good level and the knee")
    max_requests: int = Field(default=2000, ge=1, description="total requests of the whole sweep")
    max_seconds: float = Field(default=900, gt=0, description="wall time of the whole sweep")
    request_timeout_seconds: float = Field(default=60, gt=0, description="bound of one whole streamed request")
    max_tokens: int = Field(default=64, ge=1, description="output tokens of the fixed prompt, and of the "
                            "long-context tail while no mix is known")
    prompt_words: int = Field(default=200, ge=1, description="prompt tokens of the fixed prompt (no traffic mix known)")
    prefix_modes: tuple[PrefixMode, ...] = Field(
        default=("shared", "unique"), min_length=1,
        description="prompt prefix modes swept; unique may be left out only where no prod endpoint is declared")

    def levels(self) -> list[int]:
        """1, 2, 4, … and the ceiling itself."""
        out = [1 << i for i in range(0, max(1, self.ceiling).bit_length()) if (1 << i) <= self.ceiling]
        if out[-1] != self.ceiling:
            out.append(self.ceiling)
        return out


@dataclass(frozen=True)
class Sample:
    """One request of the sweep, as the load generator saw it."""

    phase: Phase
    status: int | None
    ttft_ms: float | None = None
    total_ms: float | None = None
    error: str | None = None
    tail: bool = False  # a long-context tail request: must succeed, its latency is reported apart

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None

    @property
    def rejected(self) -> bool:
        return self.status in REJECT_STATUSES


@dataclass(frozen=True)
class MetricsPeak:
    """The worst /metrics readings seen while a level ran (``None``: the endpoint did not report it)."""

    queue_depth: float | None = None
    kv_cache_usage: float | None = None
    prefix_cache_hit_rate: float | None = None


@dataclass(frozen=True)
class LevelStats:
    concurrency: int
    prefix: PrefixMode
    requests: int
    ok: int
    rejected: int
    errors: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    completion_p50_ms: float | None
    completion_p99_ms: float | None
    queue_depth: float | None
    kv_cache_usage: float | None
    prefix_cache_hit_rate: float | None
    broken: tuple[str, ...] = ()
    first_error: str | None = None  # what the first failed (not rejected) request said, e.g. "timed out"
    tail_ttft_ms: float | None = None  # the slowest first token of the level's long-context tail requests

    @property
    def reject_rate(self) -> float:
        return self.rejected / self.requests if self.requests else 0.0

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["broken"] = list(self.broken)
        data["reject_rate"] = round(self.reject_rate, 4)
        data["error_rate"] = round(self.error_rate, 4)
        for key in ("ttft_p50_ms", "ttft_p99_ms", "completion_p50_ms", "completion_p99_ms", "tail_ttft_ms"):
            if data[key] is not None:
                data[key] = round(data[key], 1)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelStats:
        keys = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in keys}
        values["broken"] = tuple(values.get("broken", ()))
        return cls(**values)


def level_stats(concurrency: int, prefix: PrefixMode, samples: Sequence[Sample], peak: MetricsPeak,
                objectives: Objectives) -> LevelStats:
    """Statistics of one level over its steady and burst samples (warm-up excluded), and what it broke."""
    measured = [s for s in samples if s.phase != "warmup"]
    ok = [s for s in measured if s.ok]
    rejected = sum(1 for s in measured if s.rejected)
    errors = len(measured) - len(ok) - rejected
    # The tail's prefill takes its time at any load: judged by whether it is served, not by the latency objectives.
    ttfts = [s.ttft_ms for s in ok if s.ttft_ms is not None and not s.tail]
    totals = [s.total_ms for s in ok if s.total_ms is not None and not s.tail]
    tail_ttfts = [s.ttft_ms for s in ok if s.ttft_ms is not None and s.tail]
    stats = LevelStats(
        concurrency=concurrency,
        prefix=prefix,
        requests=len(measured),
        ok=len(ok),
        rejected=rejected,
        errors=errors,
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p99_ms=percentile(ttfts, 99),
        completion_p50_ms=percentile(totals, 50),
        completion_p99_ms=percentile(totals, 99),
        queue_depth=peak.queue_depth,
        kv_cache_usage=peak.kv_cache_usage,
        prefix_cache_hit_rate=peak.prefix_cache_hit_rate,
        first_error=next((s.error or f"HTTP {s.status}" for s in measured if not s.ok and not s.rejected), None),
        tail_ttft_ms=max(tail_ttfts) if tail_ttfts else None,
    )
    return LevelStats(**{**asdict(stats), "broken": tuple(broken_objectives(stats, objectives))})


def broken_objectives(stats: LevelStats, objectives: Objectives) -> list[str]:
    """Each objective this level breaks, as a short phrase with the measured value."""
    out: list[str] = []
    if stats.requests == 0:
        return ["no requests completed"]
    if stats.reject_rate > objectives.reject_rate:
        out.append(f"429/503 rate {stats.reject_rate:.0%} > {objectives.reject_rate:.0%}")
    if stats.error_rate > objectives.error_rate:
        out.append(f"error rate {stats.error_rate:.0%} > {objectives.error_rate:.0%}")
    if stats.ok == 0:
        out.append("no request succeeded")
        return out
    if objectives.ttft_p99_ms is not None and stats.ttft_p99_ms is not None and stats.ttft_p99_ms > objectives.ttft_p99_ms:
        out.append(f"TTFT p99 {stats.ttft_p99_ms:.0f} ms > {objectives.ttft_p99_ms:.0f} ms")
    if stats.completion_p99_ms is not None and stats.completion_p99_ms > objectives.completion_p99_ms:
        out.append(f"completion p99 {stats.completion_p99_ms:.0f} ms > {objectives.completion_p99_ms:.0f} ms")
    if stats.queue_depth is not None and stats.queue_depth > objectives.queue_depth:
        out.append(f"queue depth {stats.queue_depth:.0f} > {objectives.queue_depth:.0f}")
    if stats.kv_cache_usage is not None and stats.kv_cache_usage > objectives.kv_cache_usage:
        out.append(f"KV cache {stats.kv_cache_usage:.0%} > {objectives.kv_cache_usage:.0%}")
    return out


def next_level(tried: dict[int, bool], levels: Sequence[int], refine_steps: int) -> int | None:
    """The next concurrency to measure given ``tried`` (level → held its objectives), or ``None`` when done.

    Doubling until the first broken level, then bisecting between the last good
    level and the knee at most ``refine_steps`` times.
    """
    broken = sorted(c for c, good in tried.items() if not good)
    if not broken:
        remaining = [c for c in levels if c not in tried]
        return remaining[0] if remaining else None
    knee = broken[0]
    good = [c for c, ok in tried.items() if ok and c < knee]
    low = max(good) if good else 0
    refinements = sum(1 for c in tried if c not in levels)
    if refinements >= refine_steps or knee - low <= 1:
        return None
    return (low + knee) // 2 if low else None


@dataclass(frozen=True)
class SweepOutcome:
    """Everything one sweep measured, and why it stopped if it stopped before its plan's end."""

    levels: list[LevelStats]
    requests: int
    elapsed_seconds: float
    stopped_early: str | None = None
    # Every request, warm-ups included, as the model's finished counter sees it.
    own: OwnRequests = field(default_factory=OwnRequests)


@dataclass(frozen=True)
class Proposal:
    max_concurrent_requests: int | None
    max_queue_size: int | None
    knee: int | None
    knee_reasons: tuple[str, ...]
    limiting_prefix: PrefixMode | None
    reason: str
    reached_ceiling: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["knee_reasons"] = list(self.knee_reasons)
        return data


def knee_of(levels: Sequence[LevelStats]) -> LevelStats | None:
    """The lowest-concurrency level that broke an objective."""
    broken = sorted((lv for lv in levels if lv.broken), key=lambda lv: lv.concurrency)
    return broken[0] if broken else None


def propose(levels: Sequence[LevelStats], objectives: Objectives, *, ceiling: int) -> Proposal:
    """Limits below the knee, from the worse prefix mode.

    ``maxConcurrentRequests`` is the highest level below the knee that held every
    objective in every prefix mode. ``maxQueueSize`` lets a queued request wait
    at most the TTFT objective: with C requests finishing every completion-p50,
    a queue of Q drains in about Q / C × p50, so Q = C × objective / p50.
    """
    knee = knee_of(levels)
    limit_at = knee.concurrency if knee else None
    good_levels = sorted({lv.concurrency for lv in levels if not lv.broken and (limit_at is None or lv.concurrency < limit_at)})
    # A level counts as good only when no prefix mode broke at it.
    broken_at = {lv.concurrency for lv in levels if lv.broken}
    good_levels = [c for c in good_levels if c not in broken_at]
    if not good_levels:
        reasons = knee.broken if knee else ("no level measured",)
        return Proposal(None, None, limit_at, tuple(reasons), knee.prefix if knee else None,
                        f"even concurrency {limit_at or 1} breaks an objective: {'; '.join(reasons)}")
    chosen = good_levels[-1]
    at_chosen = [lv for lv in levels if lv.concurrency == chosen]
    p50s = [lv.completion_p50_ms for lv in at_chosen if lv.completion_p50_ms]
    slowest = max(p50s) if p50s else None
    wait_budget = objectives.ttft_p99_ms or DEFAULT_QUEUE_WAIT_MS
    queue = 0 if not slowest else math.floor(chosen * wait_budget / slowest)
    queue = max(0, min(queue, 4 * chosen))  # a deep queue only hides overload behind latency
    if knee is None:
        return Proposal(chosen, queue, None, (), None,
                        f"no objective broke up to the ceiling {ceiling}; proposing {chosen}",
                        reached_ceiling=True)
    return Proposal(chosen, queue, knee.concurrency, knee.broken, knee.prefix,
                    f"knee at {knee.concurrency} ({knee.prefix} prefixes: {'; '.join(knee.broken)}); "
                    f"proposing {chosen} concurrent, queue {queue}")
