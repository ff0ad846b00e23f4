"""A redacted production trace: lengths and shapes of requests, never their text (documented in docs/capacity.md).

Pure. One JSON object a line, one line a request::

    {"prompt_tokens": 1843, "output_tokens": 212, "images": 1, "tool_call": false,
     "prefix_group": "support-bot", "arrival_offset_s": 0.42}

``prompt_tokens`` and ``output_tokens`` are required; ``images`` (default 0), ``tool_call`` (default false),
``prefix_group`` (a label of at most 64 letters, digits or ``_.:-``: requests sharing one share a prompt
prefix) and ``arrival_offset_s`` (seconds since the trace began) are optional. Any other field is refused,
and a field that would carry text (``messages``, ``prompt``, ``content``, …) is refused by name: a trace
that holds text is not redacted. :func:`parse_trace` returns the records and the SHA-256 of the exact bytes,
so a traffic gate report names the trace it replayed.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from bot.domain.evaluation import percentile
from bot.domain.traffic_mix import LONG_CONTEXT_TOKENS, TrafficMix

MAX_REQUESTS = 200_000
MAX_BYTES = 32 * 1024 * 1024
FIELDS = ("prompt_tokens", "output_tokens", "images", "tool_call", "prefix_group", "arrival_offset_s")
TEXT_FIELDS = frozenset({"prompt", "messages", "content", "text", "completion", "response", "output", "input",
                         "choices", "system", "query", "answer", "tools", "arguments"})
GROUP = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class TraceError(ValueError):
    """The trace is not a redacted trace; the message names the line and the field."""


@dataclass(frozen=True)
class TraceRequest:
    prompt_tokens: int
    output_tokens: int
    images: int = 0
    tool_call: bool = False
    prefix_group: str | None = None
    arrival_offset_s: float | None = None


@dataclass(frozen=True)
class RedactedTrace:
    requests: tuple[TraceRequest, ...]
    sha256: str


def _count(line: int, name: str, value: object, *, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise TraceError(f"line {line}: `{name}` must be a whole number of at least {least}, not {str(value)[:20]!r}")
    return value


def _request(line: int, data: object) -> TraceRequest:
    if not isinstance(data, dict):
        raise TraceError(f"line {line}: each line must be one JSON object")
    for key in data:
        if str(key).lower() in TEXT_FIELDS:
            raise TraceError(f"line {line} carries text (`{str(key)[:40]}`): a redacted trace holds lengths and shapes "
                             "only, never text; drop the field and keep its token count")
        if key not in FIELDS:
            raise TraceError(f"line {line}: unknown field `{str(key)[:40]}`; a trace line has {', '.join(FIELDS)}")
    for required in ("prompt_tokens", "output_tokens"):
        if required not in data:
            raise TraceError(f"line {line}: `{required}` is missing")
    tool = data.get("tool_call", False)
    if not isinstance(tool, bool):
        raise TraceError(f"line {line}: `tool_call` must be true or false")
    group = data.get("prefix_group")
    if group is not None and (not isinstance(group, str) or not GROUP.match(group)):
        raise TraceError(f"line {line}: `prefix_group` must be a label of at most 64 letters, digits or _.:- "
                         "(a name for the shared prefix, never the prefix itself)")
    offset = data.get("arrival_offset_s")
    if offset is not None and (isinstance(offset, bool) or not isinstance(offset, (int, float)) or offset < 0):
        raise TraceError(f"line {line}: `arrival_offset_s` must be a number of seconds of at least 0")
    return TraceRequest(prompt_tokens=_count(line, "prompt_tokens", data["prompt_tokens"], least=1),
                        output_tokens=_count(line, "output_tokens", data["output_tokens"], least=1),
                        images=_count(line, "images", data.get("images", 0), least=0), tool_call=tool,
                        prefix_group=group, arrival_offset_s=None if offset is None else float(offset))


def parse_trace(raw: bytes) -> RedactedTrace:
    """Validate a JSONL trace; any line holding text or an unknown field refuses the whole trace."""
    if len(raw) > MAX_BYTES:
        raise TraceError(f"the trace is {len(raw):,} bytes; at most {MAX_BYTES:,} (sample it down)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TraceError("the trace is not UTF-8 text (one JSON object a line)") from None
    requests: list[TraceRequest] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            raise TraceError(f"line {number} is not JSON") from None
        requests.append(_request(number, data))
        if len(requests) > MAX_REQUESTS:
            raise TraceError(f"the trace has more than {MAX_REQUESTS:,} requests; sample it down")
    if not requests:
        raise TraceError("the trace holds no request")
    return RedactedTrace(tuple(requests), hashlib.sha256(raw).hexdigest())


def _peak(requests: tuple[TraceRequest, ...]) -> float | None:
    """Most requests in flight at once, from arrivals alone (each assumed to last one second)."""
    arrivals = sorted(r.arrival_offset_s for r in requests if r.arrival_offset_s is not None)
    if not arrivals:
        return None
    peak, start = 0, 0
    for end, at in enumerate(arrivals):
        while arrivals[start] <= at - 1.0:
            start += 1
        peak = max(peak, end - start + 1)
    return float(peak)


def mix_from_trace(trace: RedactedTrace) -> TrafficMix:
    reqs = trace.requests
    prompts = [float(r.prompt_tokens) for r in reqs]
    outputs = [float(r.output_tokens) for r in reqs]
    groups = [r.prefix_group for r in reqs]
    # A request whose prefix group was seen before would find its prefix cached (an upper bound on the hit rate).
    seen: set[str] = set()
    repeats = 0
    for group in groups:
        if group is not None:
            repeats += group in seen
            seen.add(group)

    def q(values: list[float], at: float) -> int:
        return round(percentile(values, at) or 0)

    n = len(reqs)
    return TrafficMix(
        source="trace", requests=n, prompt_p50=q(prompts, 50), prompt_p90=q(prompts, 90), prompt_p99=q(prompts, 99),
        output_p50=q(outputs, 50), output_p90=q(outputs, 90), output_p99=q(outputs, 99),
        long_context_share=round(sum(1 for p in prompts if p >= LONG_CONTEXT_TOKENS) / n, 4),
        image_share=round(sum(1 for r in reqs if r.images) / n, 4),
        tool_share=round(sum(1 for r in reqs if r.tool_call) / n, 4),
        prefix_hit_rate=round(repeats / n, 4) if any(groups) else None,
        peak_concurrency=_peak(reqs), trace_sha256=trace.sha256,
    )
