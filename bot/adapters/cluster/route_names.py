"""The names kimi-ops gives its HTTPRoute (kinds, annotations, labels, field manager) and the route settings lookup.

Shared by the write side (:mod:`.route`) and the read side (:mod:`.route_read`).
"""

from __future__ import annotations

from bot.config import EndpointSettings
from bot.route_config import RouteSettings

ROUTE_API_VERSION = "gateway.networking.k8s.io/v1"
ROUTE_KIND = "HTTPRoute"
GATEWAY_GROUP = "gateway.networking.k8s.io"
ROUTE_MANAGER = "kimi-ops-admission"
ADMISSION_ANNOTATION = "kimi-ops.io/admission"
REASON_ANNOTATION = "kimi-ops.io/admission-reason"
CHANGED_AT_ANNOTATION = "kimi-ops.io/admission-changed-at"
ENDPOINT_LABEL = "kimi-ops.io/endpoint"
SERVICE_LABEL = "kimi-ops.io/service"
# A pair's route is written by either side; this says whose admission the other annotations describe.
RELEASE_ANNOTATION = "kimi-ops.io/release"
"""On the workload object (InferenceEndpointConfig or Deployment): the release it runs (bot/adapters/cluster/render.py)."""
SIDE_ANNOTATION = "kimi-ops.io/admission-side"
SCHEMA_FILE = "httproute-v1.schema.json"
MAX_REASON = 500


class RouteNotConfigured(Exception):
    """The endpoint's settings have no ``route`` block, so kimi-ops keeps no route for it."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(f"endpoint {endpoint} has no route in its settings; add a route: block "
                         "(gateway, optional fallback and cohort header) to let kimi-ops steer its traffic")


def route_settings(endpoint: EndpointSettings) -> RouteSettings:
    if endpoint.route is None:
        raise RouteNotConfigured(endpoint.name)
    return endpoint.route
