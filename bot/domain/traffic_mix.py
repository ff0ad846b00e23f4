"""Production's request mix, measured without payloads, and when it has moved away from what was reviewed.

Pure. A :class:`TrafficMix` holds lengths and shares only: quantiles of prompt and
output tokens, the share of long-context requests, of image requests and of tool
calls, the prefix-cache hit rate and the peak concurrency. It is read either from
vLLM's request histograms (:func:`mix_from_histograms`: ``vllm:request_prompt_tokens``,
``vllm:request_generation_tokens``, the prefix-cache and multimodal-cache counters) or
from a redacted trace (:func:`bot.domain.redacted_trace.mix_from_trace`). Nothing in
it can carry request text.

:func:`mix_drift` compares a live mix with the mix the last capacity review measured
and says, in numbers, what moved past its threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.domain.histograms import histogram_quantile

LONG_CONTEXT_TOKENS = 32_768
"""A request whose prompt is at least this long counts as long-context (an eighth of Kimi K3's 262,144)."""

MixSource = Literal["metrics", "trace", "fixed"]

# When the live mix has moved enough to re-run a capacity review (the guide: "when context limits, modalities,
# concurrency, or traffic mix changes").
P90_PROMPT_GROWTH = 1.5  # p90 prompt length at least 1.5 × the reviewed one
LONG_SHARE_RISE = 0.05  # long-context share up by 5 points or more
IMAGE_SHARE_RISE = 0.05  # image share up by 5 points or more
MIN_REQUESTS = 20  # fewer live requests than this say nothing about a mix


class TrafficMix(BaseModel):
    """Lengths and shares of a set of requests; never their text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: MixSource
    requests: int = Field(ge=0)
    prompt_p50: int = Field(ge=0)
    prompt_p90: int = Field(ge=0)
    prompt_p99: int = Field(ge=0)
    output_p50: int = Field(ge=0)
    output_p90: int = Field(ge=0)
    output_p99: int = Field(ge=0)
    long_context_share: float = Field(default=0.0, ge=0, le=1)
    long_context_tokens: int = Field(default=LONG_CONTEXT_TOKENS, ge=1)
    image_share: float = Field(default=0.0, ge=0, le=1)
    tool_share: float | None = Field(default=None, ge=0, le=1, description="unknown from metrics")
    prefix_hit_rate: float | None = Field(default=None, ge=0, le=1)
    peak_concurrency: float | None = Field(default=None, ge=0)
    trace_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")

    def words(self) -> str:
        """One line an approver reads: ``p50/p90/p99 prompt 800/4,000/30,000 tokens, …``."""
        parts = [f"prompt p50/p90/p99 {self.prompt_p50:,}/{self.prompt_p90:,}/{self.prompt_p99:,} tokens",
                 f"output {self.output_p50:,}/{self.output_p90:,}/{self.output_p99:,}",
                 f"long-context (≥{self.long_context_tokens:,}) {self.long_context_share:.0%}",
                 f"images {self.image_share:.0%}"]
        if self.tool_share is not None:
            parts.append(f"tool calls {self.tool_share:.0%}")
        if self.prefix_hit_rate is not None:
            parts.append(f"prefix-cache hits {self.prefix_hit_rate:.0%}")
        if self.peak_concurrency is not None:
            parts.append(f"peak concurrency {self.peak_concurrency:.0f}")
        return f"{self.source}, {self.requests:,} requests: " + ", ".join(parts)


def share_at_least(threshold: float, buckets: Sequence[tuple[float, float]]) -> float:
    """The share of observations at or above ``threshold``, interpolating linearly inside its bucket."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return 0.0
    total = ordered[-1][1]
    below_bound, below_count = 0.0, 0.0
    for bound, count in ordered:
        if threshold <= bound:
            if math.isinf(bound):
                return (total - below_count) / total
            inside = (count - below_count) * (threshold - below_bound) / max(bound - below_bound, 1e-9)
            return max(0.0, min(1.0, (total - below_count - inside) / total))
        below_bound, below_count = bound, count
    return 0.0


def _q(q: float, buckets: Sequence[tuple[float, float]]) -> int:
    value = histogram_quantile(q, buckets)
    return 0 if value is None else round(value)


def mix_from_histograms(prompt: Sequence[tuple[float, float]], output: Sequence[tuple[float, float]], *,
                        image_items: float | None = None, prefix_hit_rate: float | None = None,
                        peak_concurrency: float | None = None) -> TrafficMix | None:
    """The mix of every request a vLLM served since it started, from its cumulative request histograms.

    ``image_items`` is ``vllm:mm_cache_queries_total`` (images queried): with one image per image request it
    gives the image share. None when the server has served nothing (or does not expose the histograms).
    """
    total = max((count for _, count in prompt), default=0.0)
    if total <= 0 or not output:
        return None
    return TrafficMix(
        source="metrics", requests=int(total),
        prompt_p50=_q(0.5, prompt), prompt_p90=_q(0.9, prompt), prompt_p99=_q(0.99, prompt),
        output_p50=_q(0.5, output), output_p90=_q(0.9, output), output_p99=_q(0.99, output),
        long_context_share=round(share_at_least(LONG_CONTEXT_TOKENS, prompt), 4),
        image_share=round(min(1.0, (image_items or 0.0) / total), 4),
        prefix_hit_rate=None if prefix_hit_rate is None else round(prefix_hit_rate, 4),
        peak_concurrency=peak_concurrency,
    )


def mix_drift(live: TrafficMix, reviewed: TrafficMix, *, accepted_limit: int | None) -> list[str]:
    """What moved past its threshold since the review, each with both numbers; empty when nothing did."""
    if live.requests < MIN_REQUESTS:
        return []
    moved: list[str] = []
    if live.prompt_p90 >= max(1, reviewed.prompt_p90) * P90_PROMPT_GROWTH:
        moved.append(f"p90 prompt {reviewed.prompt_p90:,} → {live.prompt_p90:,} tokens")
    if live.long_context_share >= reviewed.long_context_share + LONG_SHARE_RISE:
        moved.append(f"long-context share {reviewed.long_context_share:.0%} → {live.long_context_share:.0%}")
    if live.image_share >= reviewed.image_share + IMAGE_SHARE_RISE:
        moved.append(f"image share {reviewed.image_share:.0%} → {live.image_share:.0%}")
    if accepted_limit is not None and live.peak_concurrency is not None and live.peak_concurrency > accepted_limit:
        moved.append(f"peak concurrency {live.peak_concurrency:.0f} above the accepted limit {accepted_limit}")
    return moved
