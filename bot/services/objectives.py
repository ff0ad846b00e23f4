"""The ramp's objective check: one soak window of one endpoint against that endpoint's objectives.

The minimum the ramp needs behind the :class:`bot.services.ports.ObjectiveCheck` port: first-token p99,
5xx rate, queue depth and KV-cache usage, from the pure rules of :mod:`bot.domain.ramp`. The bounds are the
endpoint's service objectives after go-live (``slo.ttft_p99_ms``, ``slo.error_rate``) where it declares
them, so a ramp holds a candidate to what the metrics watch will page on, else its ``ttft_objective_ms`` and
``ramp`` bounds. Another source of objectives plugs into ``Ports.objectives`` instead.
"""

from __future__ import annotations

from bot.config import EndpointSettings
from bot.domain.ramp import Window, WindowObjectives, breaches


def window_objectives(endpoint: EndpointSettings) -> WindowObjectives:
    ramp, slo = endpoint.ramp, endpoint.slo
    return WindowObjectives(ttft_p99_ms=slo.ttft_p99_ms or endpoint.ttft_objective_ms,
                            error_rate=slo.error_rate or ramp.error_rate,
                            queue_depth=ramp.queue_depth, kv_cache_usage=ramp.kv_cache_usage)


class RampObjectives:
    """The default :class:`~bot.services.ports.ObjectiveCheck`: the endpoint's own ramp bounds."""

    def breaches(self, endpoint: EndpointSettings, window: Window) -> list[str]:
        return breaches(window, window_objectives(endpoint))
