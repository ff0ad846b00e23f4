"""What the traffic gate's sweep sends: request shapes synthesised to match a traffic mix.

Pure. :func:`synthesise` turns production's mix (or, with none, the fixed prompt of
the sweep plan) into a :class:`Workload`: a cycle of :class:`RequestShape` drawn at
evenly spaced quantiles of the mix's prompt and output lengths (sent in an order
whose every stretch spans them), with the mix's image and tool-call shares spread
over the cycle, and a long-context tail every
level opens with. On prod the tail is never left out: a request at least as long as
the mix's p99 prompt and one near the served ``max_model_len``, each answering at
the mix's median output length (the plan's ``max_tokens`` with no mix). Where the release
is multimodal, at least one request of the cycle carries an image.

The tail requests must be served (an error or a rejection counts against the level,
and so does the KV cache they fill), but their latency is reported apart: a prompt of
a quarter-million tokens takes its prefill time at any load, and would otherwise set
the TTFT objective's knee at concurrency 1.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bot.domain.traffic_mix import TrafficMix

CYCLE = 20  # request shapes per cycle: each 5 % of the mix's requests
GOLDEN = 0.6180339887498949
NEAR_MAX = 0.95  # the near-max request's prompt and output fill 95 % of the context (tokenizers differ)


@dataclass(frozen=True)
class RequestShape:
    prompt_tokens: int
    output_tokens: int
    images: int = 0
    tool_call: bool = False
    tail: str | None = None  # "p99" or "max_model_len": a long-context tail request


@dataclass(frozen=True)
class Workload:
    cycle: tuple[RequestShape, ...]
    tail: tuple[RequestShape, ...] = ()
    mix: TrafficMix | None = None  # the mix it was synthesised from (None: the fixed prompt)

    def shape(self, index: int) -> RequestShape:
        """The ``index``-th request of a level (0-based): the tail first, then the cycle round and round."""
        if index < len(self.tail):
            return self.tail[index]
        return self.cycle[(index - len(self.tail)) % len(self.cycle)]

    def as_dict(self) -> dict[str, Any]:
        """What the report shows as the mix used."""
        prompts = sorted(s.prompt_tokens for s in self.cycle)
        return {
            "source": self.mix.source if self.mix else "fixed",
            "cycle": len(self.cycle),
            "prompt_tokens": {"min": prompts[0], "median": prompts[len(prompts) // 2], "max": prompts[-1]},
            "output_tokens_max": max(s.output_tokens for s in self.cycle),
            "image_requests": sum(1 for s in self.cycle if s.images),
            "tool_calls": sum(1 for s in self.cycle if s.tool_call),
            "tail": [asdict(s) for s in self.tail],
            "trace_sha256": self.mix.trace_sha256 if self.mix else None,
        }


def _quantile(points: Sequence[tuple[float, float]], q: float) -> float:
    """Piecewise-linear quantile function through ``(q, value)`` points."""
    for (q0, v0), (q1, v1) in itertools.pairwise(points):
        if q <= q1:
            return v0 + (v1 - v0) * (q - q0) / max(q1 - q0, 1e-9)
    return points[-1][1]


def _spread(share: float, count: int) -> set[int]:
    """Which of ``count`` slots carry a share ``share`` (evenly spaced; none for a zero share)."""
    n = round(share * count)
    return {math.floor(i * count / n) for i in range(n)} if n else set()


def synthesise(mix: TrafficMix | None, *, prompt_words: int, max_tokens: int, max_model_len: int, multimodal: bool,
               prod: bool) -> Workload:
    """The sweep's requests for ``mix``; with no mix, the plan's fixed prompt (and on prod, the tail still)."""
    ceiling = max(1, max_model_len)
    if mix is None:
        cycle = [RequestShape(prompt_tokens=prompt_words, output_tokens=max_tokens)]
        if multimodal:
            cycle = [*cycle * (CYCLE - 1), RequestShape(prompt_tokens=prompt_words, output_tokens=max_tokens, images=1)]
        p99 = prompt_words
    else:
        prompt = [(0.0, max(1, mix.prompt_p50 // 4)), (0.5, mix.prompt_p50), (0.9, mix.prompt_p90), (0.99, mix.prompt_p99),
                  (1.0, mix.prompt_p99)]
        output = [(0.0, max(1, mix.output_p50 // 4)), (0.5, mix.output_p50), (0.9, mix.output_p90),
                  (0.99, mix.output_p99), (1.0, mix.output_p99)]
        images = _spread(mix.image_share, CYCLE) if multimodal else set()
        if multimodal and not images:
            images = {CYCLE - 1}
        tools = _spread(mix.tool_share or 0.0, CYCLE)
        long_slots = round(mix.long_context_share * CYCLE)
        cycle = []
        for i in range(CYCLE):
            q = (i + 0.5) / CYCLE
            tokens = round(_quantile(prompt, q))
            if i >= CYCLE - long_slots:  # the mix's long-context share, whatever the interpolation says
                tokens = max(tokens, mix.long_context_tokens)
            out = max(1, round(_quantile(output, q)))
            tokens = max(1, min(tokens, ceiling - out - 1))
            cycle.append(RequestShape(prompt_tokens=tokens, output_tokens=out, images=int(i in images),
                                      tool_call=i in tools))
        # A low-discrepancy order: however few requests a level sends, they span the mix's lengths.
        cycle = [cycle[i] for i in sorted(range(CYCLE), key=lambda i: (i * GOLDEN) % 1.0)]
        p99 = mix.prompt_p99
    tail: list[RequestShape] = []
    if prod:
        # The tail answers as production does (the mix's median output; the plan's max_tokens with no mix), so it
        # holds its KV cache about as long as the level's other requests and meets them there. With the sandbox's
        # 8-token answer it stayed in the cache for a tenth of a second, and whether a level was seen full was down
        # to when /metrics happened to be read (the demo's long-context knee came out 4, 8 or 16).
        out = max(1, min(max_tokens if mix is None else mix.output_p50, ceiling // 100))
        tail.append(RequestShape(prompt_tokens=max(1, min(p99, ceiling - out - 1)), output_tokens=out, tail="p99"))
        tail.append(RequestShape(prompt_tokens=max(1, math.floor((ceiling - out) * NEAR_MAX)), output_tokens=out,
                                 tail="max_model_len"))
    return Workload(cycle=tuple(cycle), tail=tuple(tail), mix=mix)


def served_context(args: Sequence[str], ceiling: int) -> int:
    """The context length a release serves: its ``--max-model-len`` (vLLM's k/m/g and K/M/G), else ``ceiling``."""
    raw = _arg(args, "--max-model-len")
    value = (raw or "").replace("_", "")
    scale = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}.get(value[-1:], 1)
    number = value[:-1] if scale != 1 else value
    return int(number) * scale if number.isdigit() and int(number) > 0 else ceiling


def served_multimodal(args: Sequence[str]) -> bool:
    """Whether a release takes images: unless ``--limit-mm-per-prompt`` allows none."""
    raw = _arg(args, "--limit-mm-per-prompt")
    return raw is None or re.search(r'"?image"?\s*[:=]\s*0\b', raw) is None


def _arg(args: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None
