"""Each answer scored against its case's checks: refusals, JSON schemas, tool calls, code fences."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from bot.domain.evaluation.eval_set import DEFAULT_REFUSAL_PATTERNS, EvalCase, ToolCallCheck

if TYPE_CHECKING:
    import jsonschema


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str


@dataclass(frozen=True)
class Answer:
    """What the endpoint returned for one case (transport facts, no judgement)."""

    case_id: str
    http_status: int | None
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: str | None = None
    finish_reason: str | None = None
    ttft_ms: float | None = None
    latency_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class CaseResult:
    case_id: str
    kind: str
    passed: bool
    failures: tuple[str, ...]
    http_status: int | None
    latency_ms: float | None
    ttft_ms: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    sample: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "case": self.case_id,
            "kind": self.kind,
            "passed": self.passed,
            "failures": list(self.failures),
            "http_status": self.http_status,
            "latency_ms": rounded(self.latency_ms),
            "ttft_ms": rounded(self.ttft_ms),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }
        if self.sample is not None:
            data["sample"] = self.sample
        return data


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _strip_fences(text: str) -> str:
    """Models often wrap JSON in a Markdown code fence; the payload is what is inside."""
    match = re.search(r"```(?:json)?\s*(.*?)```", text, flags=re.DOTALL)
    return (match.group(1) if match else text).strip()


def is_refusal(answer: Answer, patterns: Iterable[str]) -> bool:
    """The model declined: an explicit ``refusal`` field, a content filter stop, or a declining phrase."""
    if answer.refusal:
        return True
    if answer.finish_reason == "content_filter":
        return True
    head = answer.content[:400]  # a refusal opens the answer; a later "I can't" is usually part of a task
    return any(re.search(p, head, flags=re.IGNORECASE) for p in patterns)


def _schema_problem(instance: Any, schema: dict[str, Any]) -> str | None:
    """Where the answer breaks the schema and which rule, in the schema's words only.

    jsonschema's own messages quote the offending value (``'…' is not of type 'integer'``),
    which is answer text; the report must not carry that unless sampling is on.
    """
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(instance))
    if error is None:
        return None
    path = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"{path}: {_rule_words(error)[:120]}"


def _rule_words(error: jsonschema.exceptions.ValidationError) -> str:
    rule, wanted = error.validator, cast(Any, error.validator_value)
    if rule == "required":
        missing = [name for name in wanted if isinstance(error.instance, dict) and name not in error.instance]
        return f"missing required {', '.join(repr(n) for n in missing) or 'properties'}"
    if rule == "type":
        return f"not of type {' or '.join(repr(t) for t in wanted) if isinstance(wanted, list) else repr(wanted)}"
    if rule == "enum":
        return f"not one of {wanted!r}"
    if rule == "const":
        return f"not {wanted!r}"
    if rule in ("additionalProperties", "unevaluatedProperties") and wanted is False:
        return "has properties the schema does not allow"
    if isinstance(wanted, (dict, list)):
        return f"fails {rule}"  # a subschema: its text would be long and says nothing about the answer
    return f"fails {rule} {wanted!r}"


def score(
    case: EvalCase, answer: Answer, *, refusal_patterns: Sequence[str] = DEFAULT_REFUSAL_PATTERNS, sampling: bool = False
) -> CaseResult:
    """Judge one answer against every check of its case; each failure is one short reason."""
    failures: list[str] = []
    checks = case.checks
    if answer.error is not None or answer.http_status != 200:
        failures.append(f"no answer: {answer.error or f'HTTP {answer.http_status}'}")
    else:
        text = answer.content or ""
        for pattern in checks.regex:
            if not re.search(pattern, text, flags=re.IGNORECASE | re.DOTALL):
                failures.append(f"regex {pattern!r} did not match")
        for pattern in checks.not_regex:
            if re.search(pattern, text, flags=re.IGNORECASE | re.DOTALL):
                failures.append(f"forbidden regex {pattern!r} matched")
        if checks.json_schema is not None:
            try:
                instance = json.loads(_strip_fences(text))
            except ValueError:
                failures.append("answer is not JSON")
            else:
                problem = _schema_problem(instance, checks.json_schema)
                if problem:
                    failures.append(f"JSON schema: {problem}")
        if checks.tool_call is not None:
            failures.extend(_tool_call_failures(checks.tool_call, answer.tool_calls))
        if checks.refusal is not None:
            refused = is_refusal(answer, refusal_patterns)
            if checks.refusal == "must_refuse" and not refused:
                failures.append("expected a refusal, the model complied")
            if checks.refusal == "must_not_refuse" and refused:
                failures.append("the model refused a legitimate request")
    if checks.max_latency_ms is not None and answer.latency_ms is not None and answer.latency_ms > checks.max_latency_ms:
        failures.append(f"latency {answer.latency_ms:.0f} ms above {checks.max_latency_ms:.0f} ms")
    sample = (answer.content or "")[:200] if sampling else None
    return CaseResult(
        case_id=case.id,
        kind=case.kind,
        passed=not failures,
        failures=tuple(failures),
        http_status=answer.http_status,
        latency_ms=answer.latency_ms,
        ttft_ms=answer.ttft_ms,
        prompt_tokens=answer.prompt_tokens,
        completion_tokens=answer.completion_tokens,
        sample=sample,
    )


def _tool_call_failures(expected: ToolCallCheck, calls: Sequence[ToolCall]) -> list[str]:
    if not calls:
        return [f"expected a call to tool {expected.name}, got none"]
    matching = [c for c in calls if c.name == expected.name]
    if not matching:
        return [f"expected tool {expected.name}, got {', '.join(sorted({c.name for c in calls}))}"]
    try:
        arguments = json.loads(matching[0].arguments or "{}")
    except ValueError:
        return [f"tool {expected.name} arguments are not JSON"]
    problem = _schema_problem(arguments, expected.arguments_schema)
    return [f"tool {expected.name} arguments: {problem}"] if problem else []
