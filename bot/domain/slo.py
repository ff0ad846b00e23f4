"""Service objectives after go-live and their error budgets, burned the way the SRE workbook alerts on them (pure).

Each objective is a ratio of bad events to all events over a rolling window:

* latency (``ttft``, ``queue``, ``e2e``): a request slower than the objective's p99 bound is bad, and at most
  1 % may be (that is what "p99 below X" means as a budget);
* ``errors`` (5xx answers) and ``rejects`` (429/503 overflow answers): each request answered so is bad, and the
  objective's rate is the budget.

The metrics watch keeps, per endpoint, cumulative counts of events and bad events that never fall (a
restarted server's counters are added from zero, see :func:`counter_delta`), so any window's ratio is the
difference of two samples and old samples can be thinned to one an hour without losing anything.

Alerts follow "Alerting on SLOs" (SRE workbook, ch. 5) as slok/sloth generates them: a window pair fires when
both its long and its short window burn the budget faster than the pair's factor; a fast pair pages, a slow
pair warns. The factor is the share of the whole budget that may go in the long window:
``share × objective window / long window`` (14.4 for 2 % in 1 h of a 30-day budget).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.domain.sweep import Objectives

ObjectiveName = Literal["ttft", "queue", "e2e", "errors", "rejects"]
OBJECTIVES: tuple[ObjectiveName, ...] = ("ttft", "queue", "e2e", "errors", "rejects")
LATENCY_BUDGET = 0.01  # a p99 bound: 1 % of requests may be slower
TITLES: dict[ObjectiveName, str] = {
    "ttft": "time to first token p99", "queue": "queue time p99", "e2e": "end-to-end latency p99",
    "errors": "error rate (5xx)", "rejects": "reject rate (429/503)",
}


class SloSettings(BaseModel):
    """An endpoint's objectives after go-live (``endpoints[].slo``); unset ones come from the traffic gate's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_p99_ms: float | None = Field(default=None, gt=0, description="unset: the traffic gate's TTFT p99 objective")
    queue_p99_ms: float | None = Field(default=None, gt=0, description="unset: half the TTFT p99 objective")
    e2e_p99_ms: float | None = Field(default=None, gt=0, description="unset: the traffic gate's completion p99")
    error_rate: float | None = Field(default=None, gt=0, le=1, description="unset: the traffic gate's error rate")
    reject_rate: float | None = Field(default=None, gt=0, le=1, description="unset: the traffic gate's reject rate")
    window_days: float = Field(default=7, ge=1, le=30, description="rolling window of the error budget")
    min_requests: int = Field(default=20, ge=1, description="requests a long window needs before it can alert")
    kv_cache_pressure: float = Field(default=0.95, gt=0, le=1,
                                     description="KV-cache usage that pages when requests are also rejected")
    alerting: Literal["builtin", "prometheus"] = Field(
        default="builtin", description="who pages after go-live: kimi-ops's own metrics watch, or Prometheus and "
        "Alertmanager on the rules kimi-ops renders from these objectives (docs/alerting.md); a side of a pair "
        "service is on Prometheus once both sides have it")
    selector: str | None = Field(
        default=None, max_length=500, pattern=r'^[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"',
        description='PromQL label matchers of the endpoint\'s series in Prometheus, e.g. `job="kimi-prod"` '
        '(unset: namespace="<namespace>", pod=~"<endpoint>-.*")')


@dataclass(frozen=True)
class Objective:
    """One resolved objective: its bound (ms for latency, a rate otherwise) and the bad share it allows."""

    name: ObjectiveName
    bound: float
    budget: float

    @property
    def words(self) -> str:
        bound = f"{self.bound:.0f} ms" if self.name in ("ttft", "queue", "e2e") else f"{self.bound:.2%}"
        return f"{TITLES[self.name]} ≤ {bound}"


def resolve(slo: SloSettings, *, ttft_p99_ms: float, completion_p99_ms: float, error_rate: float,
            reject_rate: float) -> tuple[Objective, ...]:
    """The endpoint's objectives: its own where set, else those the traffic gate measured the endpoint against."""
    ttft = slo.ttft_p99_ms or ttft_p99_ms
    errors = slo.error_rate or error_rate
    rejects = slo.reject_rate or reject_rate
    return (
        Objective("ttft", ttft, LATENCY_BUDGET),
        Objective("queue", slo.queue_p99_ms or ttft / 2, LATENCY_BUDGET),
        Objective("e2e", slo.e2e_p99_ms or completion_p99_ms, LATENCY_BUDGET),
        Objective("errors", errors, errors),
        Objective("rejects", rejects, rejects),
    )


def endpoint_objectives(slo: SloSettings, traffic: Objectives, ttft_objective_ms: float) -> tuple[Objective, ...]:
    """An endpoint's objectives from its settings: its ``slo``, else the traffic gate's (``traffic_objectives``)."""
    return resolve(slo, ttft_p99_ms=traffic.ttft_p99_ms or float(ttft_objective_ms),
                   completion_p99_ms=traffic.completion_p99_ms, error_rate=traffic.error_rate,
                   reject_rate=traffic.reject_rate)


# ---------------------------------------------------------------------------- counting


def counter_delta(before: float | None, after: float | None) -> float:
    """What a counter counted between two scrapes; a restarted server began again at zero."""
    if after is None:
        return 0.0
    if before is None or after < before:
        return after
    return after - before


def count_within(buckets: Iterable[tuple[float, float]], bound: float) -> float:
    """Observations at or below ``bound`` in cumulative ``(le, count)`` buckets, interpolated inside a bucket.

    The same linear interpolation as ``histogram_quantile``, so "1 % slower than the p99 bound" agrees with
    the p99 a person reads off the same histogram.
    """
    below_bound, below_count = 0.0, 0.0
    for le, count in sorted(buckets):
        if bound < le:
            if le == float("inf"):
                return below_count
            return below_count + (count - below_count) * (bound - below_bound) / (le - below_bound)
        below_bound, below_count = le, count
    return below_count


def bucket_delta(before: Sequence[tuple[float, float]], after: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    earlier = dict(before)
    if any(count < earlier.get(le, 0.0) for le, count in after):
        return list(after)  # the server restarted between the scrapes
    return [(le, count - earlier.get(le, 0.0)) for le, count in after]


@dataclass(frozen=True)
class Counts:
    """Cumulative events and bad events per objective (never falling), as one stored sample holds them."""

    events: Mapping[str, float]
    bad: Mapping[str, float]

    def __sub__(self, earlier: Counts) -> Counts:
        return Counts({k: max(0.0, v - earlier.events.get(k, 0.0)) for k, v in self.events.items()},
                      {k: max(0.0, v - earlier.bad.get(k, 0.0)) for k, v in self.bad.items()})

    def plus(self, events: Mapping[str, float], bad: Mapping[str, float]) -> Counts:
        return Counts({k: self.events.get(k, 0.0) + events.get(k, 0.0) for k in OBJECTIVES},
                      {k: self.bad.get(k, 0.0) + bad.get(k, 0.0) for k in OBJECTIVES})

    def ratio(self, name: str) -> float | None:
        total = self.events.get(name, 0.0)
        return self.bad.get(name, 0.0) / total if total > 0 else None


ZERO = Counts({k: 0.0 for k in OBJECTIVES}, {k: 0.0 for k in OBJECTIVES})


@dataclass(frozen=True)
class Sample:
    at: dt.datetime
    counts: Counts


def window(samples: Sequence[Sample], now: dt.datetime, length: dt.timedelta) -> Counts | None:
    """Counts of the window ending at the newest sample (``samples`` oldest first); None with fewer than two.

    The window starts at the newest sample at or before ``now - length`` (the oldest one when the history is
    shorter), so thinned samples make a window at most one sample step longer, never shorter.
    """
    if len(samples) < 2:
        return None
    start = now - length
    first = samples[0]
    for sample in samples:
        if sample.at <= start:
            first = sample
        else:
            break
    if first is samples[-1]:
        return None
    return samples[-1].counts - first.counts


# ---------------------------------------------------------------------------- burn-rate alerts


@dataclass(frozen=True)
class WindowPair:
    long: dt.timedelta
    short: dt.timedelta
    budget_share: float
    severity: Literal["page", "warn"]

    def factor(self, objective_window: dt.timedelta) -> float:
        return self.budget_share * (objective_window / self.long)


H = dt.timedelta(hours=1)
M = dt.timedelta(minutes=1)
# slok/sloth's page-quick, page-slow, ticket-quick and ticket-slow windows (SRE workbook table 5-8).
PAIRS: tuple[WindowPair, ...] = (
    WindowPair(1 * H, 5 * M, 0.02, "page"),
    WindowPair(6 * H, 30 * M, 0.05, "page"),
    WindowPair(24 * H, 2 * H, 0.10, "warn"),
    WindowPair(72 * H, 6 * H, 0.10, "warn"),
)
LONGEST = max(p.long for p in PAIRS)


def burn_rate(counts: Counts | None, objective: Objective) -> float | None:
    ratio = counts.ratio(objective.name) if counts is not None else None
    return None if ratio is None else ratio / objective.budget


@dataclass(frozen=True)
class Burn:
    """How one objective burns its budget now, and which alerts that makes."""

    objective: Objective
    rates: Mapping[dt.timedelta, float | None]
    budget_left: float | None  # share of the window's budget not yet spent (negative: overspent)
    page: WindowPair | None
    warn: WindowPair | None

    def line(self) -> str:
        shown = ", ".join(f"{_span(w)} {r:.1f}×" for w, r in self.rates.items() if r is not None) or "no requests yet"
        left = f"{self.budget_left:.0%} of budget left" if self.budget_left is not None else "budget unknown"
        return f"{self.objective.words}: burn {shown}; {left}"


def _span(length: dt.timedelta) -> str:
    minutes = int(length.total_seconds() // 60)
    if minutes % (24 * 60) == 0:
        return f"{minutes // (24 * 60)}d"
    return f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"


def burns(samples: Sequence[Sample], now: dt.datetime, objectives: Sequence[Objective], *,
          objective_window: dt.timedelta, min_requests: int) -> list[Burn]:
    """Every objective's burn rates over the alert windows, its budget left, and the pair that fires, if any."""
    lengths = sorted({w for p in PAIRS for w in (p.short, p.long)})
    windows = {length: window(samples, now, length) for length in lengths}
    whole = window(samples, now, objective_window)
    result: list[Burn] = []
    for objective in objectives:
        rates = {length: burn_rate(counts, objective) for length, counts in windows.items()}
        fired: dict[str, WindowPair] = {}
        for pair in PAIRS:
            long_counts = windows[pair.long]
            if long_counts is None or long_counts.events.get(objective.name, 0.0) < min_requests:
                continue
            factor = pair.factor(objective_window)
            long_rate, short_rate = rates[pair.long], rates[pair.short]
            if long_rate is not None and short_rate is not None and long_rate > factor and short_rate > factor:
                fired.setdefault(pair.severity, pair)
        spent = burn_rate(whole, objective)
        result.append(Burn(objective, rates, None if spent is None else 1 - spent, fired.get("page"), fired.get("warn")))
    return result


def alert_reason(burn: Burn, pair: WindowPair, objective_window: dt.timedelta) -> str:
    long_rate, short_rate = burn.rates.get(pair.long), burn.rates.get(pair.short)
    return (f"{burn.objective.words} is burning its {_span(objective_window)} error budget "
            f"{long_rate or 0:.1f}× over {_span(pair.long)} and {short_rate or 0:.1f}× over {_span(pair.short)} "
            f"(alert above {pair.factor(objective_window):.1f}×)")
