"""vLLM metrics snapshots: from the real sample texts and from the live stand-in.

Samples come from ``protocol-samples/vllm`` (vLLM's own documentation output); the live tests drive the stand-in
into known states (requests held running, queued, prefixes shared) and read them back through ``/metrics`` over
HTTP. Draining an endpoint: ``test_endpoint_drain.py``.
"""

from __future__ import annotations

import gc
import math
import warnings
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.adapters.endpoint import (
    HttpEndpointClient,
    MetricsUnavailable,
    histogram_quantile,
    parse_metrics,
)
from bot.adapters.endpoint.metrics import PEAK_FAMILIES, families_only
from tests.endpoint_support import SERVED, chat, chats_in_background
from tests.endpoint_support import endpoint as endpoint
from tests.endpoint_support import server as server

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "protocol-samples" / "vllm"


def doc_sample(name: str) -> str:
    """A sample as published in vLLM's docs, minus the shell prompt and the docs' "..." elisions."""
    lines = (SAMPLES / name).read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith("$ ") and line.strip() != "...") + "\n"


def test_docs_example_gives_running_requests_and_ttft_quantiles() -> None:
    snap = parse_metrics(doc_sample("vllm_metrics_docs_design_example.txt"))

    assert snap.running == 8.0
    # 140 observations; the 70th falls in (0.02, 0.04] after 13 → 0.02 + 0.02 * 57/84.
    assert snap.ttft_p50_s == pytest.approx(0.02 + 0.02 * 57 / 84)
    # The 138.6th falls in (0.08, 0.1] after 138 → 0.08 + 0.02 * 0.6/2 (the _count stands in for +Inf).
    assert snap.ttft_p99_s == pytest.approx(0.086)
    assert snap.waiting is None and snap.kv_cache_usage is None and snap.prefix_cache_hit_rate is None


def test_sample_without_vllm_serving_metrics_reports_nothing() -> None:
    snap = parse_metrics(doc_sample("vllm_metrics_docs_usage_example.txt"))

    assert (snap.running, snap.waiting, snap.kv_cache_usage, snap.ttft_p50_s) == (None, None, None, None)
    assert not (snap.running is not None and snap.idle)


def test_text_that_is_not_prometheus_is_refused_with_a_reason() -> None:
    # The docs' cache-config block elides labels with "...", which no Prometheus parser accepts.
    with pytest.raises(MetricsUnavailable, match="not Prometheus text"):
        parse_metrics(doc_sample("vllm_metrics_docs_design_http_and_cacheinfo.txt"))


MULTI_ENGINE = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Kimi-K3"} 3.0
vllm:num_requests_running{engine="1",model_name="Kimi-K3"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Kimi-K3"} 1.0
vllm:num_requests_waiting{engine="1",model_name="Kimi-K3"} 4.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Kimi-K3"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="Kimi-K3"} 0.75
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="Kimi-K3"} 600.0
vllm:prefix_cache_queries_total{engine="1",model_name="Kimi-K3"} 400.0
vllm:prefix_cache_queries_created{engine="0",model_name="Kimi-K3"} 1.7e9
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="Kimi-K3"} 300.0
vllm:prefix_cache_hits_total{engine="1",model_name="Kimi-K3"} 100.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="Kimi-K3"} 50.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="Kimi-K3"} 100.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Kimi-K3"} 100.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="Kimi-K3"} 100.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="Kimi-K3"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="Kimi-K3"} 100.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="Kimi-K3"} 100.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="Kimi-K3"} 100.0
"""


def test_label_sets_of_several_engines_are_summed() -> None:
    snap = parse_metrics(MULTI_ENGINE)

    assert (snap.running, snap.waiting) == (5.0, 5.0)
    assert snap.kv_cache_usage == 0.75  # the fullest engine, not a meaningless sum of fractions
    assert snap.prefix_cache_hit_rate == pytest.approx(0.4)
    assert (snap.prefix_cache_hits, snap.prefix_cache_queries) == (400.0, 1000.0)
    # 200 observations, 50 at ≤ 0.1 s: the median (100th) is in (0.1, 1.0] → 0.1 + 0.9 * 50/150.
    assert snap.ttft_p50_s == pytest.approx(0.1 + 0.9 * 50 / 150)


def test_names_from_before_vllm_0_9_are_read() -> None:
    text = """\
vllm:gpu_cache_usage_perc{model_name="Kimi-K3"} 0.5
vllm:gpu_prefix_cache_queries_total{model_name="Kimi-K3"} 200.0
vllm:gpu_prefix_cache_hits_total{model_name="Kimi-K3"} 50.0
"""
    snap = parse_metrics(text)

    assert snap.kv_cache_usage == 0.5
    assert snap.prefix_cache_hit_rate == 0.25


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        (0.5, [(1.0, 10.0), (math.inf, 10.0)], 0.5),  # the first bucket interpolates from zero
        (0.99, [(1.0, 1.0), (2.0, 1.0), (math.inf, 10.0)], 2.0),  # rank in +Inf → highest finite bound
        (0.5, [(1.0, 0.0), (math.inf, 0.0)], None),  # no observations
        (0.5, [(1.0, 5.0), (2.0, 10.0)], None),  # no +Inf bucket
        (0.5, [(1.0, 6.0), (2.0, 4.0), (math.inf, 10.0)], 5.0 / 6.0),  # a falling count is treated as flat
    ],
)
def test_histogram_quantile_follows_promql(q, buckets, expected) -> None:
    result = histogram_quantile(q, buckets)
    assert result == (pytest.approx(expected) if expected is not None else None)


@settings(max_examples=200, deadline=None)
@given(
    bounds=st.lists(st.floats(min_value=0.001, max_value=100, allow_nan=False), min_size=1, max_size=12, unique=True),
    fractions=st.lists(st.floats(min_value=0, max_value=1), min_size=1, max_size=60),
    q=st.floats(min_value=0.01, max_value=1.0),
)
def test_histogram_quantile_lands_in_the_bucket_of_the_true_quantile(bounds, fractions, q) -> None:
    bounds = sorted(bounds)
    observations = sorted(f * bounds[-1] for f in fractions)
    buckets = [(b, float(sum(1 for o in observations if o <= b))) for b in bounds] + [(math.inf, float(len(observations)))]
    true_value = observations[math.ceil(q * len(observations)) - 1]  # the rank PromQL compares counts with
    upper = next(b for b in bounds if true_value <= b)
    lower = max([b for b in bounds if b < upper], default=0.0)

    estimate = histogram_quantile(q, buckets)

    # Float rounding at bucket edges.
    assert lower - 1e-9 * max(1.0, abs(lower)) <= estimate <= upper + 1e-9 * max(1.0, abs(upper))
    assert lower <= true_value <= upper


def test_live_idle_server_reports_zero_running_and_waiting(server, endpoint) -> None:
    snap = HttpEndpointClient().metrics(endpoint)

    assert (snap.running, snap.waiting) == (0.0, 0.0)
    assert snap.idle
    assert snap.kv_cache_usage == 0.0
    assert snap.ttft_p50_s is None  # nothing served yet


def test_live_running_queued_and_kv_usage_reflect_requests(server, endpoint) -> None:
    server.configure(max_running=2, max_waiting=1, kv_capacity_tokens=64)
    server.hold()
    threads = chats_in_background(server.url, ["first request", "second request", "third request"])
    assert server.wait_for(lambda s: s.running == 2 and s.waiting == 1)

    snap = HttpEndpointClient().metrics(endpoint)

    assert (snap.running, snap.waiting) == (2.0, 1.0)
    assert 0 < snap.kv_cache_usage <= 1
    overflow = chat(server.url, "fourth request")
    assert overflow.status_code == 429
    server.release()
    for thread in threads:
        thread.join(timeout=10)
    after = HttpEndpointClient().metrics(endpoint)
    assert (after.running, after.waiting, after.kv_cache_usage) == (0.0, 0.0, 0.0)
    assert server.stats().served == 3 and server.stats().rejected == 1


def test_live_ttft_histogram_is_fed_by_served_requests(server, endpoint) -> None:
    server.configure(first_token_delay=0.3)
    for text in ("one", "two"):
        assert chat(server.url, text).status_code == 200

    snap = HttpEndpointClient().metrics(endpoint)

    # Both first tokens took ≥ 0.3 s, so both sit above vLLM's 0.25 s bucket bound.
    assert snap.ttft_p50_s >= 0.25
    assert snap.ttft_p99_s >= snap.ttft_p50_s


def test_live_prefix_cache_hits_when_prompts_share_a_prefix(server, endpoint) -> None:
    shared = "You are Kimi, a coding assistant for the platform team. " * 8
    chat(server.url, shared + "Question one?")
    cold = HttpEndpointClient().metrics(endpoint)
    chat(server.url, shared + "Question two?")
    warm = HttpEndpointClient().metrics(endpoint)

    assert cold.prefix_cache_hit_rate == 0.0
    assert warm.prefix_cache_hit_rate > 0.3
    assert warm.prefix_cache_hits > cold.prefix_cache_hits


def test_live_legacy_metric_names_are_read(server, endpoint) -> None:
    server.configure(legacy_metric_names=True)
    shared = "a shared system prompt long enough to fill blocks " * 6
    chat(server.url, shared + "x")
    chat(server.url, shared + "y")

    text = httpx.get(f"{server.url}/metrics").text
    snap = HttpEndpointClient().metrics(endpoint)

    assert "vllm:gpu_cache_usage_perc" in text and "vllm:kv_cache_usage_perc" not in text
    assert snap.kv_cache_usage == 0.0
    assert snap.prefix_cache_hit_rate > 0


def test_metrics_from_a_closed_port_raise_metrics_unavailable(server, endpoint) -> None:
    server.stop()

    with pytest.raises(MetricsUnavailable, match="cannot reach"):
        HttpEndpointClient(connect_timeout=1.0).metrics(endpoint)


REQUEST_HISTOGRAMS = """\
# HELP vllm:request_prompt_tokens Number of prefill tokens processed.
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_sum{engine="0",model_name="Kimi-K3"} 2.48e+06
vllm:request_prompt_tokens_bucket{engine="0",le="1000.0",model_name="Kimi-K3"} 60.0
vllm:request_prompt_tokens_bucket{engine="0",le="2000.0",model_name="Kimi-K3"} 80.0
vllm:request_prompt_tokens_bucket{engine="0",le="50000.0",model_name="Kimi-K3"} 90.0
vllm:request_prompt_tokens_bucket{engine="0",le="100000.0",model_name="Kimi-K3"} 100.0
vllm:request_prompt_tokens_bucket{engine="0",le="+Inf",model_name="Kimi-K3"} 100.0
vllm:request_prompt_tokens_count{engine="0",model_name="Kimi-K3"} 100.0
vllm:request_prompt_tokens_bucket{engine="1",le="1000.0",model_name="Kimi-K3"} 100.0
vllm:request_prompt_tokens_bucket{engine="1",le="2000.0",model_name="Kimi-K3"} 100.0
vllm:request_prompt_tokens_bucket{engine="1",le="50000.0",model_name="Kimi-K3"} 100.0
vllm:request_prompt_tokens_bucket{engine="1",le="100000.0",model_name="Kimi-K3"} 100.0
vllm:request_prompt_tokens_bucket{engine="1",le="+Inf",model_name="Kimi-K3"} 100.0
vllm:request_prompt_tokens_count{engine="1",model_name="Kimi-K3"} 100.0
# HELP vllm:request_generation_tokens Number of generation tokens processed.
# TYPE vllm:request_generation_tokens histogram
vllm:request_generation_tokens_bucket{engine="0",le="100.0",model_name="Kimi-K3"} 50.0
vllm:request_generation_tokens_bucket{engine="0",le="500.0",model_name="Kimi-K3"} 100.0
vllm:request_generation_tokens_bucket{engine="0",le="+Inf",model_name="Kimi-K3"} 100.0
vllm:request_generation_tokens_count{engine="0",model_name="Kimi-K3"} 100.0
vllm:request_generation_tokens_bucket{engine="1",le="100.0",model_name="Kimi-K3"} 100.0
vllm:request_generation_tokens_bucket{engine="1",le="500.0",model_name="Kimi-K3"} 100.0
vllm:request_generation_tokens_bucket{engine="1",le="+Inf",model_name="Kimi-K3"} 100.0
vllm:request_generation_tokens_count{engine="1",model_name="Kimi-K3"} 100.0
# HELP vllm:mm_cache_queries_total Multi-modal cache queries, in terms of number of queried items.
# TYPE vllm:mm_cache_queries_total counter
vllm:mm_cache_queries_total{engine="0",model_name="Kimi-K3"} 30.0
vllm:mm_cache_queries_total{engine="1",model_name="Kimi-K3"} 10.0
"""


def test_the_request_mix_is_read_with_vllms_documented_names_and_types() -> None:
    from bot.adapters.endpoint import metrics
    from bot.domain.traffic_mix import mix_from_histograms

    # The names read are the ones vLLM 0.34.0 declares, with the types it declares (the research fixture).
    declared = (SAMPLES / "vllm_metric_names_v0.34.0.md").read_text()
    for name, kind in (("vllm:request_prompt_tokens", "histogram"), ("vllm:request_generation_tokens", "histogram"),
                       ("vllm:mm_cache_queries", "counter"), ("vllm:prefix_cache_hits", "counter")):
        assert f"| `{name}` | {kind} |" in declared
    assert metrics.PROMPT_TOKENS == ("vllm:request_prompt_tokens",)
    assert metrics.GENERATION_TOKENS == ("vllm:request_generation_tokens",)

    snap = parse_metrics(REQUEST_HISTOGRAMS)
    mix = mix_from_histograms(snap.prompt_buckets, snap.generation_buckets, image_items=snap.image_items)

    # Two data-parallel engines' series are summed: 200 requests, 20 of them above 2,000 prompt tokens.
    assert mix is not None and mix.requests == 200 and snap.image_items == 40
    assert mix.prompt_p50 <= 1000 and 2000 < mix.prompt_p99 <= 100_000
    assert mix.image_share == 0.2 and 0.05 < mix.long_context_share < 0.1


def test_live_request_histograms_describe_what_the_stand_in_served(server, endpoint) -> None:
    from bot.domain.traffic_mix import mix_from_histograms

    for _ in range(3):
        httpx.post(f"{server.url}/v1/chat/completions", timeout=30,
                   json={"model": SERVED, "max_tokens": 30, "ignore_eos": True,
                         "messages": [{"role": "user", "content": "word " * 3000}]})

    snap = HttpEndpointClient().metrics(endpoint)
    mix = mix_from_histograms(snap.prompt_buckets, snap.generation_buckets)

    assert mix is not None and mix.requests == 3
    assert 2000 <= mix.prompt_p50 <= 5000 and 20 <= mix.output_p50 <= 50  # 3,005 prompt and 30 output tokens each


def test_escaped_label_values_are_read_and_other_text_is_refused_in_one_line() -> None:
    escaped = 'vllm:num_requests_running{model_name="a \\"quoted\\" model"} 3\n'
    assert parse_metrics(escaped).running == 3.0  # prometheus-client unescapes it
    with pytest.raises(MetricsUnavailable, match="not Prometheus text"):
        parse_metrics("<html>not metrics</html>\n")


def test_a_client_dropped_without_close_leaves_no_connection_open(endpoint) -> None:
    """Its kept-alive connection closes with it, not whenever the garbage collector finds the socket (a warning)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        assert HttpEndpointClient().metrics(endpoint).requests_finished == 0
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


@pytest.mark.parametrize("variant", [{}, {"legacy_metric_names": True}, {"prefix_hit_rate_gauge": True}])
def test_a_sweeps_peak_read_parses_only_what_it_keeps_and_agrees_with_a_full_read(server, endpoint, variant) -> None:
    server.configure(**variant)
    shared = "a shared system prompt long enough to fill blocks " * 6
    for text in ("first", "second"):
        assert chat(server.url, shared + text).status_code == 200
    server.hold()
    threads = chats_in_background(server.url, ["held one", "held two"])
    assert server.wait_for(lambda s: s.running == 2)
    text = httpx.get(f"{server.url}/metrics").text

    kept = families_only(text, PEAK_FAMILIES)
    full, peaks = HttpEndpointClient().metrics(endpoint), HttpEndpointClient().peak_metrics(endpoint)
    server.release()
    for thread in threads:
        thread.join(timeout=10)

    assert len(kept) * 5 < len(text)  # the histograms, most of the text, never reach the parser
    assert (peaks.waiting, peaks.kv_cache_usage, peaks.prefix_cache_hit_rate) == \
        (full.waiting, full.kv_cache_usage, full.prefix_cache_hit_rate)
    assert (peaks.prefix_cache_hits, peaks.prefix_cache_queries) == (full.prefix_cache_hits, full.prefix_cache_queries)
    assert 0 < peaks.kv_cache_usage <= 1 and peaks.prefix_cache_hit_rate > 0
    assert peaks.ttft_buckets == () and peaks.running is None  # not a full snapshot: nobody mistakes it for one


def test_the_peak_read_keeps_counters_declared_without_total_and_odd_label_values_whole() -> None:
    """A family declared by its bare name (older loggers), and a model name holding a character that str.splitlines
    would cut at: the kept lines parse as the full text does."""
    text = (
        '# HELP vllm:prefix_cache_hits Prefix cache hits.\n# TYPE vllm:prefix_cache_hits counter\n'
        'vllm:prefix_cache_hits_total{model_name="kimi\x85k3"} 30.0\n'
        '# HELP vllm:prefix_cache_queries Prefix cache queries.\n# TYPE vllm:prefix_cache_queries counter\n'
        'vllm:prefix_cache_queries_total{model_name="kimi\x85k3"} 40.0\n'
        '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="kimi\x85k3"} 2.0\r\n'
        '# TYPE vllm:e2e_request_latency_seconds histogram\n'
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="kimi\x85k3"} 5.0'
    )
    full, peaks = parse_metrics(text), parse_metrics(families_only(text, PEAK_FAMILIES))
    assert (peaks.prefix_cache_hits, peaks.prefix_cache_queries, peaks.waiting) == (30.0, 40.0, 2.0)
    assert (peaks.prefix_cache_hit_rate, peaks.waiting) == (full.prefix_cache_hit_rate, full.waiting)
    assert "e2e" not in families_only(text, PEAK_FAMILIES)
