"""The model's ``InferencePool`` (Gateway API Inference Extension), when the route sends to a pool, not a Service.

SageMaker HyperPod's Inference Gateway routes an ``HTTPRoute`` to an
``InferencePool`` per model: the pool selects the model pods and an Endpoint
Picker chooses the pod for each request. When ``route.backend.kind`` is
``InferencePool`` (and ``render_pool`` is on), kimi-ops renders that pool with the
release: it selects this endpoint's model pods (the same labels as the
NetworkPolicies), on the backend's port, with the configured Endpoint Picker.
The object is validated against the extension's v1 CRD
(``bot/data/inferencepool-v1.schema.json``) like every object kimi-ops applies.
"""

from __future__ import annotations

from typing import Any

from bot.config import EndpointSettings
from bot.route_config import Backend

POOL_API_VERSION = "inference.networking.k8s.io/v1"


def rendered_pool(endpoint: EndpointSettings) -> Backend | None:
    """The model backend when it is an InferencePool kimi-ops renders, else ``None``."""
    route = endpoint.route
    if route is None:
        return None
    backend = route.model_backend(endpoint.name)
    return backend if backend.kind == "InferencePool" and backend.render_pool else None


def model_pool(endpoint: EndpointSettings, metadata: dict[str, Any], selector: dict[str, str]) -> list[dict[str, Any]]:
    """The pool of the endpoint's model pods, or nothing when the route sends to a Service (or a pool kept elsewhere)."""
    backend = rendered_pool(endpoint)
    if backend is None:
        return []
    spec: dict[str, Any] = {"selector": {"matchLabels": dict(selector)}, "targetPorts": [{"number": backend.port}]}
    if backend.endpoint_picker is not None:
        spec["endpointPickerRef"] = {"kind": "Service", "name": backend.endpoint_picker.name,
                                     "port": {"number": backend.endpoint_picker.port}}
    return [{"apiVersion": POOL_API_VERSION, "kind": "InferencePool",
             "metadata": {**metadata, "name": backend.name}, "spec": spec}]
