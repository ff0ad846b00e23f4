"""The sandbox's optional traffic layer: a fallback model server and the gateway stand-in in front of both.

:func:`start_traffic_layer` starts a second OpenAI-compatible stand-in serving
the smaller fallback model (another served model name, so every answer says
which model wrote it) and a :class:`~bot.sandbox.gateway.GatewayStandIn`
playing the Gateway ``gateways/kimi-gateway``, with the endpoint's model
Service mapped to the Kimi K3 stand-in and the fallback Service to the new one.
:func:`route_config` is the endpoint's ``route`` block that matches it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from bot.adapters.cluster.rest import Rest
from bot.route_config import DEFAULT_COHORT_HEADER, DEFAULT_COHORT_VALUE, MODEL_PORT
from bot.sandbox.gateway import GatewayStandIn, ServiceKey
from bot.sandbox.openai_server import OpenAIServer

GATEWAY_NAME = "kimi-gateway"
GATEWAY_NAMESPACE = "gateways"
FALLBACK_SERVICE = "kimi-fallback"
FALLBACK_MODEL = "kimi-fallback-small"


def route_config() -> dict[str, Any]:
    """The ``route`` settings of a sandbox endpoint behind the gateway stand-in."""
    return {
        "gateway": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE},
        "fallback": {"name": FALLBACK_SERVICE, "port": MODEL_PORT},
        "cohort_header": {"name": DEFAULT_COHORT_HEADER, "value": DEFAULT_COHORT_VALUE},
    }


@dataclass
class TrafficLayer:
    fallback: OpenAIServer
    gateway: GatewayStandIn

    @property
    def url(self) -> str:
        return self.gateway.url

    def stop(self) -> None:
        self.gateway.stop()
        self.fallback.stop()


def start_traffic_layer(rest: Rest, *, namespace: str, endpoint: str, model_url: str,
                        seed: int | None = None, changed: threading.Event | None = None,
                        **fallback_behaviour: Any) -> TrafficLayer:
    """Start the fallback server and the gateway; the endpoint's Service is ``endpoint`` on port 8000."""
    fallback = OpenAIServer(served_model=FALLBACK_MODEL, **fallback_behaviour).start()
    try:
        gateway = GatewayStandIn(
            rest, name=GATEWAY_NAME, namespace=GATEWAY_NAMESPACE, seed=seed,
            cohort_header=(DEFAULT_COHORT_HEADER, DEFAULT_COHORT_VALUE),
            backends={ServiceKey(namespace, endpoint, MODEL_PORT): model_url,
                      ServiceKey(namespace, FALLBACK_SERVICE, MODEL_PORT): fallback.url},
            # Woken by the emulator's writes, the stand-in re-reads routes only as a backstop.
            changed=changed, poll_seconds=1.0 if changed is not None else 0.05,
        ).start()
    except BaseException:
        fallback.stop()
        raise
    return TrafficLayer(fallback=fallback, gateway=gateway)
