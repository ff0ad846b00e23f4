"""Adapters for the serving endpoint's HTTP APIs: OpenAI-compatible completions and vLLM's Prometheus metrics."""

from bot.adapters.endpoint.metrics import (
    MetricsUnavailable,
    histogram_quantile,
    parse_metrics,
)
from bot.adapters.endpoint.openai import HttpEndpointClient

__all__ = ["HttpEndpointClient", "MetricsUnavailable", "histogram_quantile", "parse_metrics"]
