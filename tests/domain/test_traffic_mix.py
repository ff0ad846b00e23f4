"""Production's mix from histograms and from a redacted trace, its drift, and the workload synthesised from it."""

from __future__ import annotations

import json
import math

import pytest

from bot.domain.redacted_trace import TraceError, mix_from_trace, parse_trace
from bot.domain.traffic_mix import TrafficMix, mix_drift, mix_from_histograms, share_at_least
from bot.domain.workload import served_context, served_multimodal, synthesise

BOUNDS = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0, 50000.0,
          100000.0, 200000.0, math.inf]


def cumulative(values: list[int]) -> list[tuple[float, float]]:
    return [(b, float(sum(1 for v in values if v <= b))) for b in BOUNDS]


def lines(*records: dict) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def test_a_mix_from_vllms_cumulative_histograms() -> None:
    prompts = [300] * 80 + [60_000] * 20
    mix = mix_from_histograms(cumulative(prompts), cumulative([100] * 100), image_items=25, prefix_hit_rate=0.4,
                              peak_concurrency=12)

    assert mix is not None and mix.requests == 100 and mix.source == "metrics"
    assert 200 <= mix.prompt_p50 <= 500 and 50_000 <= mix.prompt_p90 <= 100_000
    assert mix.long_context_share == pytest.approx(0.2)
    assert mix.image_share == 0.25 and mix.peak_concurrency == 12
    assert mix_from_histograms(cumulative([]), cumulative([])) is None  # nothing served yet: no mix


def test_share_above_a_threshold_interpolates_inside_its_bucket() -> None:
    buckets = [(10.0, 0.0), (20.0, 10.0), (math.inf, 10.0)]
    assert share_at_least(15, buckets) == pytest.approx(0.5)
    assert share_at_least(5, buckets) == 1.0 and share_at_least(25, buckets) == 0.0


def test_a_redacted_trace_gives_lengths_shares_and_its_hash() -> None:
    raw = lines(*({"prompt_tokens": 1000, "output_tokens": 50, "prefix_group": "faq", "arrival_offset_s": i * 0.1}
                  for i in range(8)),
                {"prompt_tokens": 40_000, "output_tokens": 500, "images": 2, "tool_call": True, "arrival_offset_s": 5},
                {"prompt_tokens": 50_000, "output_tokens": 400, "arrival_offset_s": 9})
    trace = parse_trace(raw)
    mix = mix_from_trace(trace)

    assert len(trace.requests) == 10 and len(trace.sha256) == 64 and mix.trace_sha256 == trace.sha256
    assert (mix.prompt_p50, mix.long_context_share, mix.image_share, mix.tool_share) == (1000, 0.2, 0.1, 0.1)
    assert mix.prefix_hit_rate == 0.7  # seven of the eight "faq" requests find their prefix cached
    assert mix.peak_concurrency == 8  # eight arrivals within one second


@pytest.mark.parametrize(("raw", "said"), [
    (b'{"prompt_tokens": 5, "output_tokens": 1, "prompt": "hello"}\n', "line 1 carries text (`prompt`)"),
    (b'{"prompt_tokens": 5, "output_tokens": 1}\n{"prompt_tokens": 5, "output_tokens": 1, "Content": "x"}\n',
     "line 2 carries text (`Content`)"),
    (b'{"prompt_tokens": 5, "output_tokens": 1, "prefix_group": "You are a helpful assistant"}\n', "prefix_group"),
    (b'{"prompt_tokens": 5, "output_tokens": 1, "user": "u1"}\n', "unknown field `user`"),
    (b'{"prompt_tokens": "5", "output_tokens": 1}\n', "`prompt_tokens` must be a whole number"),
    (b'{"output_tokens": 1}\n', "`prompt_tokens` is missing"),
    (b'not json\n', "line 1 is not JSON"),
    (b'\n', "holds no request"),
])
def test_a_trace_that_is_not_redacted_is_refused(raw: bytes, said: str) -> None:
    with pytest.raises(TraceError, match=said.replace("(", r"\(").replace(")", r"\)")):
        parse_trace(raw)


def _mix(**values: object) -> TrafficMix:
    base = {"source": "metrics", "requests": 500, "prompt_p50": 800, "prompt_p90": 3000, "prompt_p99": 9000,
            "output_p50": 200, "output_p90": 600, "output_p99": 1200, "long_context_share": 0.0, "image_share": 0.0,
            "peak_concurrency": 10}
    return TrafficMix.model_validate({**base, **values})


def test_drift_names_what_moved_with_both_numbers() -> None:
    reviewed = _mix()
    assert mix_drift(_mix(prompt_p90=4000), reviewed, accepted_limit=16) == []
    moved = mix_drift(_mix(prompt_p90=30_000, long_context_share=0.12, image_share=0.2, peak_concurrency=20), reviewed,
                      accepted_limit=16)
    assert moved == ["p90 prompt 3,000 → 30,000 tokens", "long-context share 0% → 12%", "image share 0% → 20%",
                     "peak concurrency 20 above the accepted limit 16"]
    assert mix_drift(_mix(requests=5, prompt_p90=30_000), reviewed, accepted_limit=16) == []  # too few to say


def test_the_workload_follows_the_mix_and_opens_with_a_long_context_tail_on_prod() -> None:
    mix = _mix(prompt_p99=40_000, long_context_share=0.2, image_share=0.1)
    workload = synthesise(mix, prompt_words=200, max_tokens=64, max_model_len=262_144, multimodal=True, prod=True)

    prompts = sorted(s.prompt_tokens for s in workload.cycle)
    assert len(workload.cycle) == 20 and prompts[10] == pytest.approx(800, rel=0.2)
    assert sum(1 for p in prompts if p >= 32_768) == 4  # the mix's 20 % long-context share
    assert sum(1 for s in workload.cycle if s.images) == 2
    assert [s.tail for s in workload.tail] == ["p99", "max_model_len"]
    assert workload.tail[0].prompt_tokens == 40_000 and 240_000 < workload.tail[1].prompt_tokens < 262_144
    assert workload.shape(0).tail == "p99" and workload.shape(2) == workload.cycle[0]
    # The tail answers as production does (its median output), so it stays in the KV cache as long as the level's
    # other requests; the fixed prompt's answer length stands in while no mix is known.
    assert [s.output_tokens for s in workload.tail] == [200, 200]  # the mix's p50, not max_tokens (64)
    fixed = synthesise(None, prompt_words=200, max_tokens=64, max_model_len=262_144, multimodal=False, prod=True)
    assert [s.output_tokens for s in fixed.tail] == [64, 64]
    # Off prod no tail is forced; a text-only release gets no image.
    quiet = synthesise(mix, prompt_words=200, max_tokens=64, max_model_len=262_144, multimodal=False, prod=False)
    assert quiet.tail == () and not any(s.images for s in quiet.cycle)


def test_the_release_says_its_context_and_whether_it_takes_images() -> None:
    assert served_context(["/opt/ml/model", "--max-model-len", "128k"], 262_144) == 128_000
    assert served_context(["/opt/ml/model", "--max-model-len=256K"], 1) == 262_144
    assert served_context(["/opt/ml/model"], 262_144) == 262_144
    assert served_multimodal(["/opt/ml/model"]) and not served_multimodal(["--limit-mm-per-prompt", '{"image": 0}'])
