"""The model gate's verdicts: each kind's pass rate, and the comparison with production's report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.domain.evaluation.eval_set import EvalSet, Tolerances
from bot.domain.evaluation.scoring import CaseResult
from bot.domain.evaluation.summary import Summary


@dataclass(frozen=True)
class Verdict:
    """A check outcome in domain terms; the service turns it into a ``Check``."""

    name: str
    status: Literal["pass", "warn", "fail"]
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


def kind_verdicts(eval_set: EvalSet, summary: Summary, results: Sequence[CaseResult]) -> list[Verdict]:
    """One verdict per kind: its pass rate against the set's minimum, naming the failed cases."""
    out: list[Verdict] = []
    for kind, agg in sorted(summary.kinds.items()):
        need = eval_set.required_pass_rate(kind)
        failed = [r for r in results if r.kind == kind and not r.passed]
        text = f"{agg.passed}/{agg.total} passed"
        details = {"failed": {r.case_id: list(r.failures) for r in failed}}
        if agg.pass_rate + 1e-9 >= need:
            out.append(Verdict(f"model.{kind}", "pass", text, details))
        else:
            first = failed[0]
            out.append(
                Verdict(f"model.{kind}", "fail", f"{text} (need {need:.0%}); {first.case_id}: {first.failures[0]}", details)
            )
    return out


def compare(current: Summary, baseline: Summary | None, tolerances: Tolerances) -> list[Verdict]:
    """Side-by-side with production: a pass-rate fall or latency rise beyond tolerance fails."""
    if baseline is None:
        return [Verdict("model.baseline", "warn", "no production report to compare with (first release on this endpoint)")]
    out: list[Verdict] = []
    if (baseline.set_name, baseline.set_version) != (current.set_name, current.set_version):
        out.append(
            Verdict(
                "model.baseline",
                "warn",
                f"production ran set {baseline.set_name} v{baseline.set_version}, this run v{current.set_version}; "
                "comparing shared kinds",
            )
        )
    drops: list[str] = []
    for kind, now in sorted(current.kinds.items()):
        before = baseline.kinds.get(kind)
        if before is None:
            continue
        if before.pass_rate - now.pass_rate > tolerances.pass_rate_drop + 1e-9:
            drops.append(f"{kind} {before.pass_rate:.0%}→{now.pass_rate:.0%}")
    if drops:
        out.append(Verdict("model.quality_vs_production", "fail", "pass rate fell: " + ", ".join(drops)))
    else:
        out.append(
            Verdict(
                "model.quality_vs_production", "pass", f"pass rate {current.pass_rate:.0%} vs production {baseline.pass_rate:.0%}"
            )
        )
    rises: list[str] = []
    pairs = [("p50", current.latency_p50_ms, baseline.latency_p50_ms), ("p95", current.latency_p95_ms, baseline.latency_p95_ms)]
    for label, now_ms, before_ms in pairs:
        if now_ms is None or before_ms is None:
            continue
        allowed = max(before_ms * (1 + tolerances.latency_increase), before_ms + tolerances.latency_floor_ms)
        if now_ms > allowed:
            rises.append(f"{label} {before_ms:.0f}→{now_ms:.0f} ms")
    latency_details = {
        "current": {"p50": current.latency_p50_ms, "p95": current.latency_p95_ms},
        "production": {"p50": baseline.latency_p50_ms, "p95": baseline.latency_p95_ms},
    }
    if rises:
        out.append(
            Verdict(
                "model.latency_vs_production",
                "fail",
                f"latency rose beyond {tolerances.latency_increase:.0%}: " + ", ".join(rises),
                latency_details,
            )
        )
    else:
        out.append(
            Verdict(
                "model.latency_vs_production",
                "pass",
                f"p50 {_ms(current.latency_p50_ms)} / p95 {_ms(current.latency_p95_ms)} vs production "
                f"{_ms(baseline.latency_p50_ms)} / {_ms(baseline.latency_p95_ms)}",
                latency_details,
            )
        )
    return out


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"
