"""The ramp's objective check: one soak window of one endpoint against that endpoint's ramp bounds.

The minimum the ramp needs behind the :class:`bot.services.ports.ObjectiveCheck` port: first-token p99
(the endpoint's ``ttft_objective_ms``), 5xx rate, queue depth and KV-cache usage, from the pure rules of
:mod:`bot.domain.ramp`. A richer source of service objectives plugs into ``Ports.objectives`` instead.
"""

from __future__ import annotations

from bot.config import EndpointSettings
from bot.domain.ramp import Window, WindowObjectives, breaches


def window_objectives(endpoint: EndpointSettings) -> WindowObjectives:
    ramp = endpoint.ramp
    return WindowObjectives(ttft_p99_ms=endpoint.ttft_objective_ms, error_rate=ramp.error_rate,
                            queue_depth=ramp.queue_depth, kv_cache_usage=ramp.kv_cache_usage)


class RampObjectives:
    """The default :class:`~bot.services.ports.ObjectiveCheck`: the endpoint's own ramp bounds."""

    def breaches(self, endpoint: EndpointSettings, window: Window) -> list[str]:
        return breaches(window, window_objectives(endpoint))
