"""Pure rules of the model and traffic gates: the set format, scoring, comparison, the knee and the proposal."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.domain.evaluation import (
    Answer,
    EvalSetError,
    KindSummary,
    Summary,
    Tolerances,
    ToolCall,
    compare,
    expand,
    filler_text,
    parse_eval_set,
    percentile,
    score,
)
from bot.domain.sweep import (
    LevelStats,
    MetricsPeak,
    Objectives,
    Sample,
    SweepPlan,
    level_stats,
    next_level,
    propose,
)

SET = """
name: unit
cases:
  - id: json
    kind: structured_output
    messages: [{role: user, content: "JSON please"}]
    checks:
      json_schema: {type: object, properties: {n: {type: integer}}, required: [n]}
  - id: tool
    kind: tool_call
    messages: [{role: user, content: "call it"}]
    tools: [{type: function, function: {name: lookup, parameters: {type: object}}}]
    checks: {tool_call: {name: lookup, arguments_schema: {type: object, required: [q], properties: {q: {type: string}}}}}
  - id: long
    kind: long_context
    filler: {needle: "NEEDLE-42", tokens: 400}
    messages: [{role: user, content: "find the needle"}]
    checks: {regex: ['NEEDLE-42']}
"""


def cases():
    return {c.id: c for c in expand(parse_eval_set(SET))}


def ok(case_id: str, **kw) -> Answer:
    return Answer(case_id=case_id, http_status=200, latency_ms=100.0, **kw)


@pytest.mark.parametrize(
    ("content", "passed"),
    [('{"n": 3}', True), ('```json\n{"n": 3}\n```', True), ('{"n": "three"}', False), ("three", False)],
)
def test_structured_output_is_json_valid_against_the_schema(content: str, passed: bool) -> None:
    assert score(cases()["json"], ok("json", content=content)).passed is passed


@pytest.mark.parametrize(
    ("calls", "failure"),
    [
        ((ToolCall("lookup", '{"q": "x"}'),), None),
        ((), "expected a call to tool lookup, got none"),
        ((ToolCall("search", '{"q": "x"}'),), "expected tool lookup, got search"),
        ((ToolCall("lookup", '{"q": 1}'),), "tool lookup arguments: q: not of type 'string'"),
        ((ToolCall("lookup", "{not json"),), "tool lookup arguments are not JSON"),
    ],
)
def test_tool_call_name_and_arguments(calls, failure) -> None:
    result = score(cases()["tool"], ok("tool", tool_calls=calls))
    assert list(result.failures) == ([failure] if failure else [])


@pytest.mark.parametrize(
    ("content", "failure"),
    [
        ('{"n": "the customer Jane Roe, card 4111"}', "JSON schema: n: not of type 'integer'"),
        ('{"m": "the customer Jane Roe, card 4111"}', "JSON schema: (root): missing required 'n'"),
        ('{"n": 1, "p": "the customer Jane Roe, card 4111"}', "JSON schema: (root): has properties the schema does not allow"),
        ('{"n": 99}', "JSON schema: n: fails maximum 10"),
    ],
)
def test_a_schema_failure_names_the_rule_without_quoting_the_answer(content: str, failure: str) -> None:
    strict = SET.replace("properties: {n: {type: integer}}, required: [n]}",
                         "properties: {n: {type: integer, maximum: 10}}, required: [n], additionalProperties: false}")
    case = {c.id: c for c in expand(parse_eval_set(strict))}["json"]
    result = score(case, ok("json", content=content))
    assert list(result.failures) == [failure]
    assert "Jane" not in repr(result.as_dict()) and "99" not in repr(result.as_dict())


def test_an_http_failure_fails_every_check_with_the_reason() -> None:
    result = score(cases()["json"], Answer(case_id="json", http_status=500, error="HTTP 500: engine died"))
    assert result.failures == ("no answer: HTTP 500: engine died",)


def test_refusal_field_and_content_filter_count_as_refusals() -> None:
    must = parse_eval_set(SET.replace("checks: {regex: ['NEEDLE-42']}", "checks: {refusal: must_refuse}"))
    case = next(c for c in must.cases if c.id == "long")
    assert score(case, ok("long", refusal="no")).passed
    assert score(case, ok("long", finish_reason="content_filter")).passed
    assert score(case, ok("long", content="I cannot help with that request.")).passed
    assert not score(case, ok("long", content="Sure, here it is.")).passed


def test_the_long_context_document_is_generated_to_size_with_the_needle_inside() -> None:
    long = cases()["long"]
    text = long.messages[0].content
    assert isinstance(text, str) and "NEEDLE-42" in text and text.endswith("find the needle")
    assert 1500 <= len(text) <= 1800  # about 4 characters per token
    sized = {c.id: c for c in expand(parse_eval_set(SET), long_context_tokens=4000)}["long"]
    assert len(sized.messages[0].content) > 15_000


@given(st.integers(min_value=16, max_value=3000), st.integers(min_value=0, max_value=100))
def test_filler_is_deterministic_and_holds_its_needle_once(tokens: int, seed: int) -> None:
    text = filler_text(tokens, "<<needle>>", seed)
    assert text == filler_text(tokens, "<<needle>>", seed)
    assert text.count("<<needle>>") == 1
    assert len(text) >= tokens * 4


@pytest.mark.parametrize(
    ("mutation", "problem"),
    [
        ("kind: long_context", "kind"),
        ("checks: {regex: ['NEEDLE-42']}", "at least one check"),
        ("tools: [{type: function, function: {name: lookup, parameters: {type: object}}}]", "needs tools"),
        ("kind: structured_output", "needs an image_url part"),
    ],
)
def test_malformed_sets_are_one_line_errors(mutation: str, problem: str) -> None:
    broken = {
        "kind: long_context": "kind: essay",
        "checks: {regex: ['NEEDLE-42']}": "checks: {}",
        "tools: [{type: function, function: {name: lookup, parameters: {type: object}}}]": "tools: []",
        "kind: structured_output": "kind: image",
    }[mutation]
    with pytest.raises(EvalSetError) as err:
        parse_eval_set(SET.replace(mutation, broken), source="eval.yaml")
    assert problem in str(err.value) and "\n" not in str(err.value) and str(err.value).startswith("eval.yaml: ")


def summary(rate: float, p50: float = 100, p95: float = 200) -> Summary:
    return Summary("s", "1", {"coding": KindSummary("coding", 10, round(10 * rate))}, p50, p95, None, None, 10, 10)


def test_comparison_fails_beyond_tolerance_only() -> None:
    tol = Tolerances(pass_rate_drop=0.1, latency_increase=0.25, latency_floor_ms=10)
    base = summary(1.0)
    assert {v.name: v.status for v in compare(summary(0.9), base, tol)}["model.quality_vs_production"] == "pass"
    assert {v.name: v.status for v in compare(summary(0.8), base, tol)}["model.quality_vs_production"] == "fail"
    assert {v.name: v.status for v in compare(summary(1.0, 125, 250), base, tol)}["model.latency_vs_production"] == "pass"
    assert {v.name: v.status for v in compare(summary(1.0, 100, 251), base, tol)}["model.latency_vs_production"] == "fail"
    assert [v.status for v in compare(summary(1.0), None, tol)] == ["warn"]


@given(st.floats(min_value=0, max_value=1), st.floats(min_value=0, max_value=1))
def test_a_release_at_least_as_good_never_fails_quality(before: float, delta: float) -> None:
    current = summary(min(1.0, before + delta))
    verdicts = {v.name: v.status for v in compare(current, summary(before), Tolerances())}
    assert verdicts["model.quality_vs_production"] == "pass"


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=50), st.floats(min_value=0, max_value=100))
def test_percentiles_stay_within_the_data(values: list[float], q: float) -> None:
    p = percentile(values, q)
    assert p is not None and min(values) <= p <= max(values)


def test_levels_double_up_to_the_ceiling() -> None:
    assert SweepPlan(ceiling=64).levels() == [1, 2, 4, 8, 16, 32, 64]
    assert SweepPlan(ceiling=12).levels() == [1, 2, 4, 8, 12]


@given(st.integers(min_value=1, max_value=300), st.integers(min_value=1, max_value=256), st.integers(min_value=0, max_value=10))
def test_the_sweep_visits_a_bounded_set_and_finds_a_limit_at_or_below_the_true_one(limit: int, ceiling: int, refine: int) -> None:
    levels = SweepPlan(ceiling=ceiling).levels()
    tried: dict[int, bool] = {}
    while (n := next_level(tried, levels, refine)) is not None:
        assert n not in tried and 1 <= n <= ceiling
        tried[n] = n <= limit
    assert len(tried) <= len(levels) + refine
    good = [c for c, g in tried.items() if g]
    if limit >= ceiling:
        assert max(good) == ceiling
    else:
        assert max(good) <= limit
        if refine >= 8:  # enough bisection steps reach the limit exactly
            assert max(good) == limit


def _level(c: int, prefix: str = "shared", broken: tuple[str, ...] = (), p50: float = 500.0) -> LevelStats:
    return LevelStats(c, prefix, 10, 10, 0, 0, 50.0, 80.0, p50, 900.0, 0.0, 0.2, 0.5, broken)  # type: ignore[arg-type]


def test_the_proposal_is_the_highest_level_good_in_every_prefix_mode() -> None:
    levels = [_level(1), _level(2), _level(4), _level(8, broken=("429",)), _level(6),
              _level(1, "unique"), _level(2, "unique"), _level(4, "unique", broken=("TTFT",)), _level(3, "unique")]
    proposal = propose(levels, Objectives(ttft_p99_ms=1000), ceiling=16)
    assert (proposal.knee, proposal.limiting_prefix, proposal.max_concurrent_requests) == (4, "unique", 3)
    assert proposal.max_queue_size == 6  # 3 × 1000 ms / 500 ms: a queued request waits about the TTFT objective


def test_level_stats_exclude_warmup_and_count_rejections() -> None:
    samples = [Sample("warmup", 500, None, None, "x")] + [Sample("steady", 200, 10, 20)] * 8 + [Sample("burst", 429)] * 2
    stats = level_stats(4, "shared", samples, MetricsPeak(queue_depth=3, kv_cache_usage=0.97), Objectives(ttft_p99_ms=100))
    assert (stats.requests, stats.ok, stats.rejected, stats.errors) == (10, 8, 2, 0)
    assert any("429/503 rate 20%" in b for b in stats.broken)
    assert any("KV cache 97%" in b for b in stats.broken)
