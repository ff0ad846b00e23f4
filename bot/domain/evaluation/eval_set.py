"""The evaluation set's format: cases, their checks, tolerances, read from YAML and refused whole when wrong."""

from __future__ import annotations

import re
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

Kind = Literal["coding", "tool_call", "structured_output", "long_context", "image", "refusal", "adversarial"]
KINDS: tuple[Kind, ...] = ("coding", "tool_call", "structured_output", "long_context", "image", "refusal", "adversarial")

# Phrases with which chat models decline; an operator can extend them in the set.
DEFAULT_REFUSAL_PATTERNS: tuple[str, ...] = (
    r"\bI(?:'m| am)? (?:sorry|afraid)\b",
    r"\bI (?:can(?:'|no)t|cannot|won't|will not|am unable to|'m unable to|am not able to) "
    r"(?:help|assist|provide|do|comply|share|create|write|give)",
    r"\b(?:can't|cannot|won't) (?:help|assist) with (?:that|this)",
    r"\bnot able to (?:help|assist)",
)


class EvalSetError(ValueError):
    """The evaluation set is malformed; the message names the field and the fix."""


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"] = "text"
    text: str


class ImageURL(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(pattern=r"^(data:image/(png|jpeg|gif|webp);base64,|https://)")


class ImagePart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["image_url"] = "image_url"
    image_url: ImageURL


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str | list[TextPart | ImagePart]


class ToolCallCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})

    @field_validator("arguments_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        import jsonschema  # here, not at the top: loading the settings must not import it (~0.2 s)

        jsonschema.Draft202012Validator.check_schema(value)
        return value


class CaseChecks(BaseModel):
    """What a good answer looks like; every check given must hold."""

    model_config = ConfigDict(extra="forbid")

    regex: list[str] = Field(default_factory=list, description="each must match the answer text (case-insensitive)")
    not_regex: list[str] = Field(default_factory=list, description="none may match the answer text")
    json_schema: dict[str, Any] | None = Field(default=None, description="the answer is JSON valid against this schema")
    tool_call: ToolCallCheck | None = None
    refusal: Literal["must_refuse", "must_not_refuse"] | None = None
    max_latency_ms: float | None = Field(default=None, gt=0)

    @field_validator("regex", "not_regex")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"regular expression {pattern!r} does not compile: {exc}") from None
        return value

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            import jsonschema

            jsonschema.Draft202012Validator.check_schema(value)
        return value

    @property
    def names(self) -> list[str]:
        present = [
            ("regex", bool(self.regex or self.not_regex)),
            ("json_schema", self.json_schema is not None),
            ("tool_call", self.tool_call is not None),
            ("refusal", self.refusal is not None),
            ("max_latency", self.max_latency_ms is not None),
        ]
        return [name for name, on in present if on]


class Filler(BaseModel):
    """A long-context case's generated document: ``tokens`` of filler with ``needle`` in the middle."""

    model_config = ConfigDict(extra="forbid")
    tokens: int | None = Field(default=None, ge=16, description="size; defaults to the set's long_context_tokens")
    needle: str
    seed: int = 7


class EvalCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    kind: Kind
    messages: list[Message] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.0, ge=0)
    filler: Filler | None = None
    checks: CaseChecks

    @model_validator(mode="after")
    def _coherent(self) -> EvalCase:
        if not self.checks.names:
            raise ValueError(f"case {self.id}: give at least one check")
        if self.checks.tool_call is not None and not self.tools:
            raise ValueError(f"case {self.id}: a tool_call check needs tools")
        if self.filler is not None and self.kind != "long_context":
            raise ValueError(f"case {self.id}: only long_context cases take a filler")
        if self.kind == "image" and not any(
            isinstance(part, ImagePart) for m in self.messages if not isinstance(m.content, str) for part in m.content
        ):
            raise ValueError(f"case {self.id}: an image case needs an image_url part in its messages")
        return self

    def request_body(self, model: str) -> dict[str, Any]:
        """The OpenAI-compatible chat-completion request for this case."""
        body: dict[str, Any] = {
            "model": model,
            "messages": [m.model_dump(mode="json") for m in self.messages],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        if self.tools:
            body["tools"] = self.tools
        if self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        if self.response_format is not None:
            body["response_format"] = self.response_format
        return body


class Tolerances(BaseModel):
    """How much worse than production a release may be before the model gate fails."""

    model_config = ConfigDict(extra="forbid")
    pass_rate_drop: float = Field(default=0.0, ge=0, le=1, description="allowed fall of a kind's pass rate")
    latency_increase: float = Field(default=0.25, ge=0, description="allowed relative rise of p50/p95 latency")
    latency_floor_ms: float = Field(default=50.0, ge=0, description="rises smaller than this are noise")


class EvalSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    version: str = "1"
    long_context_tokens: int = Field(default=32_000, ge=16)
    concurrency: int = Field(default=4, ge=1, le=64)
    timeout_seconds: float = Field(default=120.0, gt=0)
    sampling: bool = Field(default=False, description="store answer excerpts in the report (off: metadata only)")
    min_pass_rate: dict[Kind, float] = Field(default_factory=dict, description="per kind; 1.0 when absent")
    tolerances: Tolerances = Field(default_factory=Tolerances)
    refusal_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_REFUSAL_PATTERNS))
    cases: list[EvalCase] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> EvalSet:
        ids = [c.id for c in self.cases]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"case ids must be unique; repeated: {', '.join(dupes)}")
        return self

    @property
    def kinds(self) -> list[str]:
        return sorted({c.kind for c in self.cases})

    def required_pass_rate(self, kind: str) -> float:
        return float(self.min_pass_rate.get(kind, 1.0))  # type: ignore[call-overload]


def parse_eval_set(text: str, *, source: str = "evaluation set") -> EvalSet:
    """Read an evaluation set from YAML text; any problem raises one-line :class:`EvalSetError`."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise EvalSetError(f"{source} is not valid YAML{where}; fix the file") from None
    try:
        return EvalSet.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise EvalSetError(f"{source}: {loc or 'top level'}: {msg}{more}") from None
