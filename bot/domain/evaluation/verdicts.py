"""The model gate's verdicts: each kind's pass rate, and the comparison with production's report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.domain.evaluation.eval_set import EvalSet, Tolerances
from bot.domain.evaluation.latency import Remeasured, rises
from bot.domain.evaluation.scoring import CaseResult
from bot.domain.evaluation.summary import Summary

NAMED_REMEASURED = 5
"""How many re-measured cases the latency verdict names in its reason."""


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


def compare(current: Summary, baseline: Summary | None, tolerances: Tolerances,
            remeasured: Sequence[Remeasured] = ()) -> list[Verdict]:
    """Side-by-side with production: a pass-rate fall or latency rise beyond tolerance fails.

    ``current``'s latencies are those after the second look at the slow cases (``remeasured``, see :mod:`.latency`);
    the latency verdict says what they stand on.
    """
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
    rose = rises(current, baseline, tolerances)
    latency_details: dict[str, Any] = {
        "current": {"p50": current.latency_p50_ms, "p95": current.latency_p95_ms},
        "production": {"p50": baseline.latency_p50_ms, "p95": baseline.latency_p95_ms},
        # What the percentiles stand on: of nine answers, p95 is the slowest or nearly.
        "answers": current.answered,
        "remeasured": [r.as_dict() for r in remeasured],
    }
    measured = _measured(current, remeasured)
    if rose:
        text = ", ".join(f"{r.label} {r.before_ms:.0f}→{r.now_ms:.0f} ms" for r in rose)
        out.append(Verdict("model.latency_vs_production", "fail",
                           f"latency rose beyond {tolerances.latency_increase:.0%}: {text} ({measured})", latency_details))
    else:
        out.append(
            Verdict(
                "model.latency_vs_production",
                "pass",
                f"p50 {_ms(current.latency_p50_ms)} / p95 {_ms(current.latency_p95_ms)} vs production "
                f"{_ms(baseline.latency_p50_ms)} / {_ms(baseline.latency_p95_ms)} ({measured})",
                latency_details,
            )
        )
    return out


def _measured(current: Summary, remeasured: Sequence[Remeasured]) -> str:
    """How the candidate's percentiles were measured: over how many answers, and which cases were timed twice."""
    text = f"{current.answered} answers"
    if remeasured:
        # A few by name keep a chat message short; the details list them all.
        named = ", ".join(r.describe() for r in remeasured[:NAMED_REMEASURED])
        more = len(remeasured) - NAMED_REMEASURED
        text += f"; re-measured once, the faster try kept: {named}" + (f" and {more} more" if more > 0 else "")
    return text


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"
