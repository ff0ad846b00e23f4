"""The model gate: run the fixed evaluation set against the new endpoint and compare it with production.

The workflow calls :func:`run_model_gate` once the endpoint is ready. Each case's
result (pass/fail, reasons, latency, tokens — no prompt or answer text unless
the set turns sampling on) and the aggregates go into the report's attachments,
so the next release's gate compares against them. Before the gate fails on latency, the cases slower than the
broken bound, or than their own latency cap, are sent once more and keep their faster time
(:mod:`bot.domain.evaluation.latency` says why).
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from bot.config import EndpointSettings
from bot.domain.checks import Check, GateReport, stopped_report
from bot.domain.evaluation import (
    Answer,
    CaseResult,
    EvalSet,
    EvalSetError,
    Remeasured,
    Summary,
    Verdict,
    best_of_two,
    compare,
    expand,
    kind_verdicts,
    over_their_cap,
    parse_eval_set,
    score,
    summarise,
    to_remeasure,
)
from bot.domain.own_requests import OwnLedger, own_requests_of
from bot.domain.release_report import MAX_REPORT_BYTES, pass_rate_of, release_report_check
from bot.services import ports
from bot.services.context import Context, require
from bot.services.errors import NotConfigured

DEFAULT_EVAL_SET = Path(__file__).resolve().parents[2] / "deploy" / "evaluation" / "kimi-k3-default.yaml"


def eval_set_path(ctx: Context) -> Path:
    return ctx.settings.evaluation_set or DEFAULT_EVAL_SET


def load_eval_set(ctx: Context) -> EvalSet:
    """The configured evaluation set; a missing or malformed file raises :class:`EvalSetError`."""
    path = eval_set_path(ctx)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        raise EvalSetError(f"evaluation set {path} cannot be read; set KIMI_EVALUATION_SET to an existing YAML file") from None
    return parse_eval_set(text, source=str(path))


def _check(v: Verdict) -> Check:
    return Check(name=v.name, status=v.status, reason=v.reason, details=v.details)


def baseline_summary(baseline: dict[str, Any] | None) -> tuple[Summary | None, str | None]:
    """The production summary stored in a previous model-gate report, and its release name."""
    evaluation = ((baseline or {}).get("attachments") or {}).get("evaluation") or {}
    summary = evaluation.get("summary")
    if not summary:
        return None, None
    return Summary.from_dict(summary), evaluation.get("release")


def run_model_gate(ctx: Context, endpoint: EndpointSettings, release_name: str, baseline: dict[str, Any] | None, *,
                   ledger: OwnLedger | None = None, stop: threading.Event | None = None) -> GateReport:
    """Evaluate ``release_name`` as served by ``endpoint``; ``baseline`` is the live release's model-gate report.

    ``ledger`` hears of each case before it is sent (kimi-ops's own requests, for the closed door). Once ``stop``
    is set the evaluation sends nothing more, and the report says only that it was stopped (nobody stores it).
    """
    try:
        evaluator = require(ctx.ports.evaluator, "endpoint client", "to run the evaluation set")
    except NotConfigured as absent:
        return GateReport(gate="model", checks=[Check.errored("model.evaluation", str(absent))])
    try:
        eval_set = load_eval_set(ctx)
    except EvalSetError as exc:
        return GateReport(gate="model", checks=[Check.errored("model.evaluation_set", str(exc))])
    cases = expand(eval_set)
    answers = evaluator.run(endpoint, cases, concurrency=eval_set.concurrency, timeout=eval_set.timeout_seconds,
                            ledger=ledger, stop=stop)
    if stop is not None and stop.is_set():
        return stopped_report("model", "model.evaluation")
    if answers and all(a.http_status is None for a in answers):
        first = answers[0].error or "no answer"
        silent = Check.errored("model.evaluation", f"the endpoint {endpoint.url} did not answer: {first}")
        return GateReport(gate="model", checks=[silent])
    by_id = {c.id: c for c in cases}

    def judged(answer: Answer) -> CaseResult:
        return score(by_id[answer.case_id], answer, refusal_patterns=eval_set.refusal_patterns,
                     sampling=eval_set.sampling)

    results = [judged(a) for a in answers]
    summary = summarise(eval_set, results)
    production, production_release = baseline_summary(baseline)
    sent = list(answers)
    remeasured: list[Remeasured] = []
    slow = to_remeasure(results, summary, production, eval_set.tolerances)
    slow += [c for c in over_their_cap(results, {c.id: c.checks.max_latency_ms for c in cases}) if c not in slow]
    if slow:
        # Before failing on latency, the answers that broke a bound get one more try, after the first pass and at the
        # set's concurrency: a case that only waited behind another request's long prefill is fast the second time,
        # a slower release is slow both times (bot/domain/evaluation/latency.py says why, the report says which).
        again = evaluator.run(endpoint, [by_id[case_id] for case_id in slow], concurrency=eval_set.concurrency,
                              timeout=eval_set.timeout_seconds, ledger=ledger, stop=stop)
        if stop is not None and stop.is_set():
            return stopped_report("model", "model.evaluation")
        sent += again
        results, remeasured = best_of_two(results, {a.case_id: _whole(a) for a in again})
        # A case over its own latency cap is judged again on its faster try; its other checks stand as first answered.
        kept = {r.case_id: r.kept_ms for r in remeasured}
        results = [judged(replace(a, latency_ms=kept[a.case_id])) if a.case_id in kept else result
                   for a, result in zip(answers, results, strict=True)]
        summary = summarise(eval_set, results)
    verdicts = kind_verdicts(eval_set, summary, results) + compare(summary, production, eval_set.tolerances, remeasured)
    attachments: dict[str, Any] = {
        "evaluation": {
            "release": release_name,
            "set": eval_set.name,
            "version": eval_set.version,
            "sampling": eval_set.sampling,
            "summary": summary.as_dict(),
            "cases": [r.as_dict() for r in results],
            # The cases timed twice before the latency verdict (each case above keeps its faster try).
            "remeasured": [r.as_dict() for r in remeasured],
            # What the candidate's finished-request counter saw of these cases (the closed-door check subtracts it).
            "own_requests": own_requests_of(sent).as_dict(),
            "production": {"release": production_release, "summary": production.as_dict()} if production else None,
            # The allowed fall of a kind's pass rate: the plot draws the lowest rate that passes.
            "tolerance": eval_set.tolerances.pass_rate_drop,
        }
    }
    # No plot here: users are closed out while the gate runs. The notifier draws it from these numbers after the
    # report is posted (bot/adapters/gate_plots.py).
    failed = sum(1 for r in results if not r.passed)
    versus = f" vs production {production_release}" if production_release else ""
    again_text = f" ({len(remeasured)} re-measured)" if remeasured else ""
    text = (f"{len(results) - failed}/{len(results)} cases passed; "
            f"p50 {_ms(summary.latency_p50_ms)}, p95 {_ms(summary.latency_p95_ms)}{again_text}{versus}")
    return GateReport(gate="model", checks=[_check(v) for v in verdicts], summary=text, attachments=attachments)


def with_release_report(ctx: Context, report: GateReport, uri: str | None) -> GateReport:
    """``report`` with the release's own evaluation report (read from where the release names it) shown beside it."""
    fresh = pass_rate_of(json.dumps({"attachments": report.attachments}).encode())
    document, problem = None, None
    reader: object = ctx.ports.artifacts  # the fakes' verifier reads no documents
    if uri and isinstance(reader, ports.ReadsDocuments):
        try:
            document = reader.read_document(uri, MAX_REPORT_BYTES)
        except Exception as exc:  # shown as a warning: the fresh run is what the gate judges
            problem = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    elif uri:
        problem = "this process has no S3 access"
    check = release_report_check(uri, document, problem, fresh)
    return report.model_copy(update={"checks": [*report.checks, check]})


def _whole(answer: Answer) -> float | None:
    """The latency of a whole answer; None for an error or a cut stream, whose timing says nothing of the model."""
    return answer.latency_ms if answer.http_status == 200 and answer.error is None else None


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"
