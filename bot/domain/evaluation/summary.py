"""Per-kind pass rates and latency percentiles of one run of the set."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.domain.evaluation.eval_set import EvalSet
from bot.domain.evaluation.scoring import CaseResult, rounded


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    data = sorted(values)
    if not data:
        return None
    if len(data) == 1:
        return float(data[0])
    pos = (len(data) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return float(data[lo] + (data[hi] - data[lo]) * (pos - lo))


@dataclass(frozen=True)
class KindSummary:
    kind: str
    total: int
    passed: int

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass(frozen=True)
class Summary:
    """Aggregates of one evaluation run, comparable across releases."""

    set_name: str
    set_version: str
    kinds: dict[str, KindSummary]
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    answered: int
    total: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pass_rate(self) -> float:
        total = sum(k.total for k in self.kinds.values())
        return sum(k.passed for k in self.kinds.values()) / total if total else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "set": self.set_name,
            "version": self.set_version,
            "pass_rate": round(self.pass_rate, 4),
            "kinds": {
                k: {"total": v.total, "passed": v.passed, "pass_rate": round(v.pass_rate, 4)}
                for k, v in sorted(self.kinds.items())
            },
            "latency_p50_ms": rounded(self.latency_p50_ms),
            "latency_p95_ms": rounded(self.latency_p95_ms),
            "ttft_p50_ms": rounded(self.ttft_p50_ms),
            "ttft_p95_ms": rounded(self.ttft_p95_ms),
            "answered": self.answered,
            "total": self.total,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Summary:
        kinds = {
            k: KindSummary(kind=k, total=int(v["total"]), passed=int(v["passed"])) for k, v in (data.get("kinds") or {}).items()
        }
        return cls(
            set_name=str(data.get("set", "")),
            set_version=str(data.get("version", "")),
            kinds=kinds,
            latency_p50_ms=data.get("latency_p50_ms"),
            latency_p95_ms=data.get("latency_p95_ms"),
            ttft_p50_ms=data.get("ttft_p50_ms"),
            ttft_p95_ms=data.get("ttft_p95_ms"),
            answered=int(data.get("answered", 0)),
            total=int(data.get("total", 0)),
        )


def summarise(eval_set: EvalSet, results: Sequence[CaseResult]) -> Summary:
    """Pass rate per kind and latency percentiles over the answered cases."""
    kinds: dict[str, KindSummary] = {}
    for kind in sorted({r.kind for r in results}):
        mine = [r for r in results if r.kind == kind]
        kinds[kind] = KindSummary(kind=kind, total=len(mine), passed=sum(r.passed for r in mine))
    answered = [r for r in results if r.http_status == 200]
    latencies = [r.latency_ms for r in answered if r.latency_ms is not None]
    ttfts = [r.ttft_ms for r in answered if r.ttft_ms is not None]
    return Summary(
        set_name=eval_set.name,
        set_version=eval_set.version,
        kinds=kinds,
        latency_p50_ms=percentile(latencies, 50),
        latency_p95_ms=percentile(latencies, 95),
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p95_ms=percentile(ttfts, 95),
        answered=len(answered),
        total=len(results),
    )
