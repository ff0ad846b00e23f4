"""The model gate's latency comparison with production, and its one re-measurement before failing.

The evaluation set is small (the default has nine cases), and the p95 of nine answers is the slowest of them or
nearly. So one case that happened to wait behind another request's long-context prefill (vLLM prefills a long
prompt before a newcomer's), or behind a stall of the node, moved p95 by seconds and failed a release that
answers as fast as production. A bigger set would make p95 a real percentile, but each case costs GPU time at
every promotion; comparing a lower percentile would hide a release that is slow on its long-context case only.

So the comparison is kept, and a failing one gets a second look: the cases slower than the bound they broke are
sent once more, after the first pass, and each keeps the faster of its two tries (interference only ever adds
time, so the faster try is the better measure of the release). A release that really is slower is slow both times
and still fails. The verdict names every case re-measured with both timings and how many answers the percentiles
stand on, so the approver sees what was measured. Production's stored report is the other side: on one node the
live release no longer runs while its successor is judged, so it cannot be measured again beside it.

A case over its own ``max_latency_ms`` gets the same second look, for the same reason: one stall fails a cap as
easily as it moves p95. The case is then judged on its faster try; its other checks stand as first answered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from bot.domain.evaluation.eval_set import Tolerances
from bot.domain.evaluation.scoring import CaseResult
from bot.domain.evaluation.summary import Summary


@dataclass(frozen=True)
class Rise:
    """A latency statistic beyond what the tolerances allow over production's."""

    label: str  # "p50" or "p95"
    before_ms: float
    now_ms: float
    allowed_ms: float


@dataclass(frozen=True)
class Remeasured:
    """One case sent a second time because its first answer was slower than a bound the release broke."""

    case_id: str
    first_ms: float
    again_ms: float | None  # None: the second try got no whole answer, so the first timing stands

    @property
    def kept_ms(self) -> float:
        return self.first_ms if self.again_ms is None else min(self.first_ms, self.again_ms)

    def as_dict(self) -> dict[str, float | str | None]:
        again = None if self.again_ms is None else round(self.again_ms, 1)
        return {"case": self.case_id, "first_ms": round(self.first_ms, 1), "again_ms": again,
                "kept_ms": round(self.kept_ms, 1)}

    def describe(self) -> str:
        again = "no answer" if self.again_ms is None else f"{self.again_ms:.0f} ms"
        return f"{self.case_id} {self.first_ms:.0f}→{again}"


def allowed_ms(before_ms: float, tolerances: Tolerances) -> float:
    """The highest value a statistic of production's ``before_ms`` may take: the relative rise or the floor."""
    return max(before_ms * (1 + tolerances.latency_increase), before_ms + tolerances.latency_floor_ms)


def rises(current: Summary, baseline: Summary, tolerances: Tolerances) -> list[Rise]:
    """The statistics (p50, p95) of ``current`` beyond what ``tolerances`` allow over ``baseline``'s."""
    out: list[Rise] = []
    pairs = (("p50", current.latency_p50_ms, baseline.latency_p50_ms),
             ("p95", current.latency_p95_ms, baseline.latency_p95_ms))
    for label, now_ms, before_ms in pairs:
        if now_ms is None or before_ms is None:
            continue
        bound = allowed_ms(before_ms, tolerances)
        if now_ms > bound:
            out.append(Rise(label, before_ms, now_ms, bound))
    return out


def to_remeasure(results: Sequence[CaseResult], current: Summary, baseline: Summary | None,
                 tolerances: Tolerances) -> list[str]:
    """The cases to send again before the gate fails on latency: every answer slower than the lowest broken bound.

    Those are the answers that put a statistic over its bound (an answer under every bound never raises one), so
    if they were only unlucky, their second tries bring the statistics back. Nothing is sent again when latency
    passes or there is no production report to compare with.
    """
    if baseline is None:
        return []
    broken = rises(current, baseline, tolerances)
    if not broken:
        return []
    bound = min(r.allowed_ms for r in broken)
    return _slower(results, lambda _case: bound)


def over_their_cap(results: Sequence[CaseResult], caps: Mapping[str, float | None]) -> list[str]:
    """The answered cases slower than their own latency cap (``caps``: a case's ``max_latency_ms``, None: no cap)."""
    return _slower(results, caps.get)


def _slower(results: Sequence[CaseResult], bound: Callable[[str], float | None]) -> list[str]:
    """The answered cases slower than the bound ``bound`` gives their id (None: no bound)."""
    return [r.case_id for r in results if _answered(r) and r.latency_ms is not None
            and (limit := bound(r.case_id)) is not None and r.latency_ms > limit]


def best_of_two(results: Sequence[CaseResult], again: Mapping[str, float | None]
                ) -> tuple[list[CaseResult], list[Remeasured]]:
    """``results`` with each re-measured case's latency its faster try, and the record of what was re-measured.

    ``again`` maps a case sent again to the latency of its second whole answer (None when it got none). The pass or
    fail of each case stays its first answer's here; the model gate scores a case that broke its own cap again on
    the kept time, its other checks as first answered (:func:`bot.services.model_gate.run_model_gate`).
    """
    kept: list[CaseResult] = []
    record: list[Remeasured] = []
    for result in results:
        if result.case_id in again and result.latency_ms is not None:
            look = Remeasured(result.case_id, result.latency_ms, again[result.case_id])
            record.append(look)
            result = replace(result, latency_ms=look.kept_ms)
        kept.append(result)
    return kept, record


def _answered(result: CaseResult) -> bool:
    return result.http_status == 200
