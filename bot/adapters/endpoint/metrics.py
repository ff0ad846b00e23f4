"""Reads vLLM's Prometheus ``/metrics`` into a :class:`~bot.domain.readiness.MetricsSnapshot`.

The text is parsed with prometheus-client's own parser. Samples are matched on
their metric name only and summed across label sets: current vLLM adds an
``engine`` label (one series per data-parallel engine) and may serve several
model names, so a scraper keyed on the full label set would break. Names renamed
in vLLM 0.9 (``gpu_cache_usage_perc``, ``gpu_prefix_cache_*``) are read when the
current ones are absent; vLLM ≤ 0.6's ``gpu_prefix_cache_hit_rate`` gauge gives
the hit rate when neither counter is there. The finished-request counter (``request_success``) is
summed over every finish reason, so two snapshots give the requests served in between.

A traffic sweep reads ``/metrics`` 20 times a second for its peaks alone (queue, KV cache, prefix cache):
:func:`scrape` with ``families=PEAK_FAMILIES`` hands the parser only those families' lines, a twentieth of the
stand-in's text (a real server's histograms are most of its ``/metrics``).

Time-to-first-token quantiles come from the cumulative histogram buckets with the
same linear interpolation as PromQL's ``histogram_quantile``; they describe every
request since the server started (there is no rate window in one scrape).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bot.domain.histograms import histogram_quantile
from bot.domain.readiness import MetricsSnapshot

__all__ = ["PEAK_FAMILIES", "MetricsUnavailable", "families_only", "histogram_quantile", "parse_metrics", "scrape"]

RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
# vLLM ≤ 0.6 exposed no prefix-cache counters, only this gauge (a fraction, one series per engine).
PREFIX_HIT_RATE = ("vllm:gpu_prefix_cache_hit_rate",)
TTFT = "vllm:time_to_first_token_seconds"
# Time a request waited before the engine scheduled it: vLLM ≥ 0.6 and v1; 0.4–0.5 called it time_in_queue.
QUEUE_TIME = ("vllm:request_queue_time_seconds", "vllm:time_in_queue_requests")
E2E = ("vllm:e2e_request_latency_seconds",)
# Exposed as ``vllm:request_success_total`` by every vLLM (older loggers declared the ``_total`` name, newer
# ones let prometheus-client add it); the bare name is what a scrape declaring the family untyped shows.
FINISHED = ("vllm:request_success_total", "vllm:request_success")
# Request histograms (tokens per request) and the multimodal cache's queried items (images): the traffic mix.
PROMPT_TOKENS = ("vllm:request_prompt_tokens",)
GENERATION_TOKENS = ("vllm:request_generation_tokens",)
IMAGE_ITEMS = ("vllm:mm_cache_queries_total", "vllm:mm_cache_queries")
# vLLM's API server counts every HTTP answer by status class (prometheus-fastapi-instrumentator).
HTTP_REQUESTS = "http_requests_total"
# What a sweep's sampler keeps of each read: the deepest queue, the fullest KV cache, the prefix cache's hit rate.
PEAK_FAMILIES = WAITING + KV_USAGE + PREFIX_HITS + PREFIX_QUERIES + PREFIX_HIT_RATE


class MetricsUnavailable(Exception):
    """``/metrics`` could not be read or parsed; the message says why in one line."""


def _samples(text: str) -> dict[str, list[tuple[Mapping[str, str], float]]]:
    """Every sample by its exposed name (``…_total``, ``…_bucket`` included)."""
    found: dict[str, list[tuple[Mapping[str, str], float]]] = defaultdict(list)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                found[sample.name].append((sample.labels, float(sample.value)))
    except ValueError as exc:
        raise MetricsUnavailable(f"/metrics is not Prometheus text: {str(exc).splitlines()[0][:200]}") from None
    return found


def _sum(samples: Mapping[str, list[tuple[Mapping[str, str], float]]], names: Sequence[str]) -> float | None:
    """The first present name's values summed over label sets; None when no name is exposed."""
    for name in names:
        values = [v for _, v in samples.get(name, []) if not math.isnan(v)]
        if values:
            return sum(values)
    return None


def _max(samples: Mapping[str, list[tuple[Mapping[str, str], float]]], names: Sequence[str]) -> float | None:
    # A usage fraction does not add up across engines: each has its own cache, and the fullest one
    # is the one that starts preempting, so report that one.
    for name in names:
        values = [v for _, v in samples.get(name, []) if not math.isnan(v)]
        if values:
            return max(values)
    return None


def _mean(samples: Mapping[str, list[tuple[Mapping[str, str], float]]], names: Sequence[str]) -> float | None:
    # A rate per engine: the engines' mean (they serve alike-sized shares), never their sum.
    for name in names:
        values = [v for _, v in samples.get(name, []) if not math.isnan(v)]
        if values:
            return sum(values) / len(values)
    return None


def _histogram(samples: Mapping[str, list[tuple[Mapping[str, str], float]]], name: str) -> list[tuple[float, float]]:
    """Cumulative buckets summed across label sets; ``_count`` stands in for a missing ``+Inf`` bucket."""
    counts: dict[float, float] = defaultdict(float)
    for labels, value in samples.get(f"{name}_bucket", []):
        try:
            counts[float(labels["le"])] += value
        except (KeyError, ValueError):
            continue
    if counts and math.inf not in counts:
        total = _sum(samples, (f"{name}_count",))
        if total is not None:
            counts[math.inf] = total
    return sorted(counts.items())


def _first_histogram(samples: Mapping[str, list[tuple[Mapping[str, str], float]]],
                     names: Sequence[str]) -> list[tuple[float, float]]:
    for name in names:
        if buckets := _histogram(samples, name):
            return buckets
    return []


def parse_metrics(text: str) -> MetricsSnapshot:
    """A snapshot from one ``/metrics`` text; a metric the server does not expose is None."""
    samples = _samples(text)
    hits = _sum(samples, PREFIX_HITS)
    queries = _sum(samples, PREFIX_QUERIES)
    buckets = _histogram(samples, TTFT)
    return MetricsSnapshot(
        running=_sum(samples, RUNNING),
        waiting=_sum(samples, WAITING),
        kv_cache_usage=_max(samples, KV_USAGE),
        prefix_cache_hit_rate=(hits / queries) if hits is not None and queries else _mean(samples, PREFIX_HIT_RATE),
        ttft_p50_s=histogram_quantile(0.5, buckets),
        ttft_p99_s=histogram_quantile(0.99, buckets),
        prefix_cache_hits=hits,
        prefix_cache_queries=queries,
        requests_finished=_sum(samples, FINISHED),
        ttft_buckets=tuple(buckets),
        http_requests=_sum(samples, (HTTP_REQUESTS,)),
        http_errors=_status_class(samples, "5xx"),
        http_rejects=_rejects(samples),
        queue_buckets=tuple(_first_histogram(samples, QUEUE_TIME)),
        e2e_buckets=tuple(_first_histogram(samples, E2E)),
        prompt_buckets=tuple(_first_histogram(samples, PROMPT_TOKENS)),
        generation_buckets=tuple(_first_histogram(samples, GENERATION_TOKENS)),
        image_items=_sum(samples, IMAGE_ITEMS),
    )


def _rejects(samples: Mapping[str, list[tuple[Mapping[str, str], float]]]) -> float | None:
    """Overflow answers: exact 429 and 503 where statuses are not grouped, else every 4xx (429 is one).

    vLLM's instrumentator groups statuses by class by default, so a grouped server's overflow 503s count as
    errors, not rejects; the limits kimi-ops renders answer 429 unless the endpoint chose 503.
    """
    rows = samples.get(HTTP_REQUESTS)
    if not rows:
        return None
    statuses = {labels.get("status", "") for labels, _ in rows}
    wanted = {"429", "503"} if statuses & {"429", "503", "200"} else {"4xx"}
    return sum(v for labels, v in rows if labels.get("status") in wanted and not math.isnan(v))


def _status_class(samples: Mapping[str, list[tuple[Mapping[str, str], float]]], status: str) -> float | None:
    """HTTP answers of one status class (``5xx``) summed over handlers; None when the server does not count them."""
    rows = samples.get(HTTP_REQUESTS)
    if not rows:
        return None
    return sum(v for labels, v in rows if labels.get("status") == status and not math.isnan(v))


def fetch_text(client: httpx.Client, url: str, unavailable: type[Exception]) -> str:
    """GET ``url`` on ``client`` (shared by the caller: never closed here); any failure raises ``unavailable``.

    One wording for every Prometheus endpoint kimi-ops scrapes (vLLM's ``/metrics``, the DCGM exporter):
    ``timed out reading URL``, ``cannot reach URL: why``, ``URL answered HTTP 503``.
    """
    try:
        response = client.get(url)
    except httpx.TimeoutException:
        raise unavailable(f"timed out reading {url}") from None
    except httpx.RequestError as exc:
        raise unavailable(f"cannot reach {url}: {exc}") from None
    if response.status_code != 200:
        raise unavailable(f"{url} answered HTTP {response.status_code}")
    return response.text


def families_only(text: str, names: Sequence[str]) -> str:
    """The lines of ``text`` that start with a family of ``names``: its samples, ``# HELP`` and ``# TYPE``.

    A counter's ``_total`` is left off the name matched, so its family line is kept whether the server declares
    the family with it or without it. A longer name with the same start is kept too; the parser sorts it out.
    """
    stems = tuple({name.removesuffix("_total") for name in names})
    comments = tuple(f"# {kind} {stem}" for kind in ("HELP", "TYPE") for stem in stems)
    # Lines end at "\n" only, as the parser reads them (str.splitlines would also cut at \x85 in a label value).
    return "".join(f"{line}\n" for line in text.split("\n") if line.startswith(stems + comments))


def scrape(client: httpx.Client, url: str, families: Sequence[str] | None = None) -> MetricsSnapshot:
    """GET ``url`` and parse it (only ``families``' lines, when named; the rest of the snapshot is then None);
    any failure becomes :class:`MetricsUnavailable` with its reason."""
    text = fetch_text(client, url, MetricsUnavailable)
    return parse_metrics(text if families is None else families_only(text, families))
