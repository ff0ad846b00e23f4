"""The rules of kimi-ops's HTTPRoute: which requests go where under an admission, and what each answer says it is.

Two rules always (a change of admission only moves weights):

* the internal cohort (its header, ``Exact``): the model at the cohort's share, the fallback at the rest;
* every other request (``PathPrefix /``): the model at the admission's share, the fallback at the rest.

With a smaller fallback model (not a pair's other side, which runs Kimi K3 too; but a pair side's route while
its failover sends users to the service's smaller fallback) two more, each with one more
header match and so taking precedence: requests that declare they need Kimi K3 (``route.requires_header``),
with and without the cohort header, go to the model alone. While their class of requests is not admitted its
weight is 0, which a conforming gateway answers with 500: they get the gateway's unavailable answer, never a
silently smaller model.

Every backend reference carries a ``ResponseHeaderModifier`` filter that sets ``route.model_header`` (default
``x-kimi-model``) to the model that answers: the release running on the model backend, or the fallback's name
(a pair's other side: the release running there). A backend is a Service (group ``""``, with its port) or an
InferencePool (group ``inference.networking.k8s.io``, no port: the pool names its target ports).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.config import EndpointSettings
from bot.domain.admission import Admission
from bot.route_config import Backend, RouteSettings

EVERYTHING = {"type": "PathPrefix", "value": "/"}


@dataclass(frozen=True)
class ModelLabels:
    """What ``x-kimi-model`` says for answers from the model backend and from the fallback."""

    model: str
    fallback: str | None = None


def backend_ref(backend: Backend, weight: int, header: str, label: str) -> dict[str, Any]:
    ref: dict[str, Any] = {"group": backend.group, "kind": backend.kind, "name": backend.name}
    if backend.kind == "Service":
        ref["port"] = backend.port
    ref["weight"] = weight
    ref["filters"] = [{"type": "ResponseHeaderModifier",
                       "responseHeaderModifier": {"set": [{"name": header, "value": label}]}}]
    return ref


def _split(route: RouteSettings, endpoint: EndpointSettings, percent: int, labels: ModelLabels) -> list[dict[str, Any]]:
    refs = [backend_ref(route.model_backend(endpoint.name), percent, route.model_header, labels.model)]
    if route.fallback is not None:
        refs.append(backend_ref(route.fallback, 100 - percent, route.model_header,
                                labels.fallback or route.fallback.model_name or route.fallback.name))
    return refs


def guards_kimi(endpoint: EndpointSettings) -> bool:
    """Whether requests that need Kimi K3 get rules of their own: only where the fallback is a smaller model."""
    return endpoint.smaller_fallback


def route_rules(endpoint: EndpointSettings, route: RouteSettings, admission: Admission, cohort_value: str,
                labels: ModelLabels) -> list[dict[str, Any]]:
    """The route's ``spec.rules`` for ``admission`` (see the module docstring)."""
    cohort = {"type": "Exact", "name": route.cohort_header.name, "value": cohort_value}
    to_cohort, to_others = admission.percent_for(cohort=True), admission.percent_for(cohort=False)
    rules: list[dict[str, Any]] = []
    if guards_kimi(endpoint):
        requires = {"type": "Exact", "name": route.requires_header.name, "value": route.requires_header.value}
        model = route.model_backend(endpoint.name)
        for headers, percent in (([cohort, requires], to_cohort), ([requires], to_others)):
            # Kimi K3 alone: admitted, every such request reaches it; not admitted, weight 0 is the gateway's 500.
            rules.append({"matches": [{"path": dict(EVERYTHING), "headers": headers}],
                          "backendRefs": [backend_ref(model, 100 if percent else 0, route.model_header, labels.model)]})
    rules.append({"matches": [{"path": dict(EVERYTHING), "headers": [cohort]}],
                  "backendRefs": _split(route, endpoint, to_cohort, labels)})
    rules.append({"matches": [{"path": dict(EVERYTHING)}], "backendRefs": _split(route, endpoint, to_others, labels)})
    return rules
