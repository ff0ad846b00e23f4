"""Pure rules of the ramp: the admission steps after the traffic gate, and whether a soak window held.

After the traffic gate is approved, users meet the candidate in steps: the
internal cohort first, then each configured share of ordinary traffic, then
everyone. Each step is held for a soak interval; the window's measurements
(deltas of the model server's own counters and histograms between the start
and the end of the window, with the bot's own requests subtracted) must stay
inside the objectives, or the ramp aborts and the previous release is restored.
A window in which nobody sent a request proves nothing and is said so: it
holds (there is nothing to breach) but the reason names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bot.domain.histograms import histogram_quantile
from bot.domain.readiness import MetricsSnapshot

INTERNAL = "internal"
OPEN = "open"


def ramp_steps(percents: Sequence[int]) -> tuple[str, ...]:
    """The admission states a ramp walks through: ``internal``, each share in increasing order, ``open``."""
    shares = sorted({p for p in percents if 0 < p < 100})
    return (INTERNAL, *(f"{p}%" for p in shares), OPEN)


def next_step(steps: Sequence[str], current: str | None) -> str | None:
    """The step after ``current`` (the first when ``None``); ``None`` once the ramp is open."""
    if current is None:
        return steps[0] if steps else None
    try:
        index = list(steps).index(current)
    except ValueError:
        return steps[0] if steps else None
    return steps[index + 1] if index + 1 < len(steps) else None


def step_percent(step: str) -> int:
    """The share of ordinary traffic a step sends to the candidate: 0 for the cohort, 100 for ``open``."""
    if step == INTERNAL:
        return 0
    if step == OPEN:
        return 100
    return int(step.removesuffix("%"))


def needs_approval(step: str, approval_steps: Sequence[int]) -> bool:
    """Whether the ramp may move to ``step`` only once a person approved it (the cohort step never waits)."""
    return step != INTERNAL and step_percent(step) in approval_steps


@dataclass(frozen=True)
class WindowObjectives:
    """What one soak window must stay inside (from the endpoint's objectives and its traffic gate)."""

    ttft_p99_ms: float
    error_rate: float = 0.01
    queue_depth: float = 8
    kv_cache_usage: float = 0.95


@dataclass(frozen=True)
class Window:
    """What users got during one soak window (the bot's own requests already subtracted)."""

    requests: float
    errors: float
    ttft_p99_ms: float | None
    peak_waiting: float | None
    peak_kv_cache_usage: float | None
    seconds: float


def breaches(window: Window, objectives: WindowObjectives) -> list[str]:
    """Each objective the window broke, as a short phrase naming the measured value and the bound."""
    found: list[str] = []
    if window.requests > 0:
        rate = window.errors / window.requests
        if rate > objectives.error_rate:
            found.append(f"error rate {rate:.1%} above {objectives.error_rate:.1%} "
                         f"({window.errors:.0f} of {window.requests:.0f})")
        if window.ttft_p99_ms is not None and window.ttft_p99_ms > objectives.ttft_p99_ms:
            found.append(f"first-token p99 {window.ttft_p99_ms:.0f} ms above {objectives.ttft_p99_ms:.0f} ms")
    if window.peak_waiting is not None and window.peak_waiting > objectives.queue_depth:
        found.append(f"queue depth {window.peak_waiting:.0f} above {objectives.queue_depth:.0f}")
    if window.peak_kv_cache_usage is not None and window.peak_kv_cache_usage > objectives.kv_cache_usage:
        found.append(f"KV-cache usage {window.peak_kv_cache_usage:.0%} above {objectives.kv_cache_usage:.0%}")
    return found


def window_summary(window: Window) -> str:
    """One line a person reads in the thread: what the window saw."""
    if window.requests <= 0:
        return f"no user requests in {window.seconds:.0f} s"
    p99 = f", first-token p99 {window.ttft_p99_ms:.0f} ms" if window.ttft_p99_ms is not None else ""
    return f"{window.requests:.0f} requests in {window.seconds:.0f} s, {window.errors:.0f} errors{p99}"


def bucket_delta(before: Iterable[tuple[float, float]], after: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Cumulative histogram buckets of what happened between two scrapes (a counter reset counts from zero)."""
    earlier = dict(before)
    later = list(after)
    if any(count < earlier.get(bound, 0.0) for bound, count in later):
        return later  # the server restarted between the scrapes: its counters began again at zero
    return [(bound, count - earlier.get(bound, 0.0)) for bound, count in later]


def counter_delta(before: float | None, after: float | None) -> float:
    if after is None:
        return 0.0
    if before is None or after < before:
        return after  # first reading, or the server restarted: its counter began again at zero
    return after - before


def window_between(before: MetricsSnapshot, after: MetricsSnapshot, *, own_requests: int, seconds: float,
                   peak_waiting: float | None, peak_kv_cache_usage: float | None) -> Window:
    """What users got between two scrapes: finished requests and 5xx answers, first-token p99 of the interval."""
    requests = max(0.0, counter_delta(before.requests_finished, after.requests_finished) - own_requests)
    answered = counter_delta(before.http_requests, after.http_requests)
    errors = counter_delta(before.http_errors, after.http_errors)
    # Failed requests never reach vLLM's success counter: the HTTP counter is the wider denominator when present.
    requests = max(requests, answered - own_requests) if after.http_requests is not None else requests
    p99 = histogram_quantile(0.99, bucket_delta(before.ttft_buckets, after.ttft_buckets))
    return Window(requests=requests, errors=errors, ttft_p99_ms=p99 * 1000 if p99 is not None else None,
                  peak_waiting=peak_waiting, peak_kv_cache_usage=peak_kv_cache_usage, seconds=seconds)
