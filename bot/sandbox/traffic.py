"""The sandbox's optional traffic layer: a fallback model server and the gateway stand-in in front of both.

:func:`start_traffic_layer` starts a second OpenAI-compatible stand-in serving
the smaller fallback model (another served model name, so every answer says
which model wrote it) and a :class:`~bot.sandbox.gateway.GatewayStandIn`
playing the Gateway ``gateways/kimi-gateway``, with the endpoint's model
Service mapped to the Kimi K3 stand-in and the fallback Service to the new one.
:func:`route_config` is the endpoint's ``route`` block that matches it.
"""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass
from typing import Any

from bot.adapters.cluster.rest import Rest, object_path
from bot.route_config import DEFAULT_COHORT_HEADER, MODEL_PORT
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
        "fallback": {"name": FALLBACK_SERVICE, "port": MODEL_PORT, "model_name": FALLBACK_MODEL},
        # The cohort's value is a token made each time the route closes, in the Secret internal users read.
        "cohort_header": {"name": DEFAULT_COHORT_HEADER, "source": "token"},
    }


def cohort_secret_name(route_name: str) -> str:
    """The Secret the sandbox's token cohort lives in (the settings' default for a route named ``route_name``)."""
    return f"{route_name}-cohort"


def read_cohort(rest: Rest, namespace: str, secret: str) -> tuple[str, str] | None:
    """What an internal user sends: the header and the current token, read from the Secret as an application layer
    would (``None`` while no token exists yet)."""
    found = rest.get(object_path("Secret", secret, namespace))
    encoded = ((found or {}).get("data") or {}).get("token")
    return None if not encoded else (DEFAULT_COHORT_HEADER, base64.b64decode(str(encoded)).decode("ascii"))


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
            cohort_header=DEFAULT_COHORT_HEADER,
            backends={ServiceKey(namespace, endpoint, MODEL_PORT): model_url,
                      ServiceKey(namespace, FALLBACK_SERVICE, MODEL_PORT): fallback.url},
            # Woken by the emulator's writes, the stand-in re-reads routes only as a backstop.
            changed=changed, poll_seconds=1.0 if changed is not None else 0.05,
        ).start()
    except BaseException:
        fallback.stop()
        raise
    return TrafficLayer(fallback=fallback, gateway=gateway)
