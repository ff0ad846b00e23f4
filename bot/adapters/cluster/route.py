"""The Gateway API ``HTTPRoute`` in front of an endpoint: render, validate, apply, read back.

One ``gateway.networking.k8s.io/v1`` HTTPRoute per endpoint that has a
``route`` block in its settings (:mod:`bot.route_config`), named after the
endpoint, in the endpoint's namespace, attached to the configured Gateway.
It always has the same two rules, so changing admission only moves weights:

1. requests carrying the cohort header (``Exact`` match, e.g.
   ``x-kimi-cohort: internal``) — listed first, and more specific than rule 2
   in any case (a header match outranks none under the same path);
2. every other request (``PathPrefix /``).

Each rule's ``backendRefs`` are the model Service with weight *p* and, when
one is configured, the fallback Service with weight 100 - *p*, where *p* is the
share of that class of requests the admission sends to Kimi K3
(:class:`bot.domain.admission.Admission`). Without a fallback a closed rule
keeps the model Service alone at weight 0, which a conforming gateway answers
with 500 (see the domain module for why that form).

The route carries the annotations ``kimi-ops.io/admission`` (``closed``,
``internal``, ``25%``, ``open``), ``kimi-ops.io/admission-reason`` and
``kimi-ops.io/admission-changed-at``. It is written by server-side apply under
its own field manager ``kimi-ops-admission``, which the release apply
(``kimi-ops``) never uses, so applying a release never touches it. Before any
apply the object is validated against the HTTPRoute CRD's v1 schema shipped
in ``bot/data/httproute-v1.schema.json`` (unknown fields refused); of the CRD's
CEL rules, the one our objects could break (a Service backend needs a port) is
checked here and the API server checks the rest.

Reading back (:func:`read_route_status`) trusts nothing written by kimi-ops
alone: the state comes from the annotation *and* from the rules and weights,
and each parent's ``Accepted`` / ``ResolvedRefs`` conditions come from
``status.parents`` as the Gateway's controller wrote them.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from importlib import resources
from typing import Any

from bot.adapters.cluster import cohort as cohorts
from bot.adapters.cluster.errors import ClusterError, InvalidManifest
from bot.adapters.cluster.rest import Rest, api_error, object_path
from bot.adapters.cluster.route_names import (
    ADMISSION_ANNOTATION,
    CHANGED_AT_ANNOTATION,
    ENDPOINT_LABEL,
    GATEWAY_GROUP,
    MAX_REASON,
    REASON_ANNOTATION,
    RELEASE_ANNOTATION,
    ROUTE_API_VERSION,
    ROUTE_KIND,
    ROUTE_MANAGER,
    SCHEMA_FILE,
    SERVICE_LABEL,
    SIDE_ANNOTATION,
    route_settings,
)
from bot.adapters.cluster.route_read import read_route_status
from bot.adapters.cluster.route_rules import ModelLabels, route_rules
from bot.adapters.cluster.validate import crd_validator, schema_errors
from bot.adapters.cluster.watching import WatchUnavailable, versions
from bot.config import EndpointSettings
from bot.domain.admission import Admission, AdmissionState, RouteStatus


@functools.cache
def route_schema_document() -> dict[str, Any]:
    """The shipped HTTPRoute CRD data: group, kind, plural, subresources and ``openAPIV3Schema``."""
    text = resources.files("bot").joinpath("data", SCHEMA_FILE).read_text(encoding="utf-8")
    document: dict[str, Any] = json.loads(text)
    return document


@functools.cache
def _validator() -> Any:
    return crd_validator(route_schema_document())


def _backend_port_errors(obj: dict[str, Any]) -> list[str]:
    """The CRD's CEL rule "Must have port for Service reference", which JSON Schema cannot say."""
    label = f"{obj.get('kind') or '?'}/{(obj.get('metadata') or {}).get('name', '?')}"
    errors: list[str] = []
    rules = (obj.get("spec") or {}).get("rules")
    for r, rule in enumerate(rules if isinstance(rules, list) else []):
        refs = rule.get("backendRefs") if isinstance(rule, dict) else None
        for b, ref in enumerate(refs if isinstance(refs, list) else []):
            if (isinstance(ref, dict) and ref.get("group", "") == "" and ref.get("kind", "Service") == "Service"
                    and "port" not in ref):
                errors.append(f"{label} spec.rules[{r}].backendRefs[{b}]: Must have port for Service reference")
    return errors


def route_errors(obj: dict[str, Any]) -> list[str]:
    """Schema errors of one HTTPRoute (empty when valid), each ``HTTPRoute/name path: message``."""
    label = f"{obj.get('kind') or '?'}/{(obj.get('metadata') or {}).get('name', '?')}"
    if obj.get("apiVersion") != ROUTE_API_VERSION or obj.get("kind") != ROUTE_KIND:
        return [f"{label} (object): must be apiVersion {ROUTE_API_VERSION}, kind {ROUTE_KIND}"]
    return schema_errors(_validator(), obj) + _backend_port_errors(obj)




def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_REASON else flat[: MAX_REASON - 1] + "…"


def render_route(endpoint: EndpointSettings, admission: Admission, reason: str, changed_at: str,
                 cohort_token: str | None = None, labels: ModelLabels | None = None) -> dict[str, Any]:
    """The endpoint's HTTPRoute for ``admission``; raises :class:`InvalidManifest` when it cannot be valid.

    ``cohort_token`` is the value a token cohort's requests carry (:mod:`.cohort`); a jwt or static cohort's value
    comes from the settings. ``labels`` name the models that answer (:mod:`.route_rules`); default: the endpoint's
    served model name and the fallback's name.
    """
    route = route_settings(endpoint)
    cohort_value = cohort_token if route.cohort_header.source == "token" else route.cohort_header.value
    if not cohort_value:
        raise InvalidManifest([f"{ROUTE_KIND}/{endpoint.name}: the internal cohort's token is needed to render the route"])
    if admission.needs_fallback and route.fallback is None:
        raise InvalidManifest([
            f"{ROUTE_KIND}/{endpoint.name} spec.rules: a share of {admission} needs route.fallback to send the other "
            f"{100 - admission.percent}% to; configure a fallback, or use closed, internal or open"])
    parent: dict[str, Any] = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": route.gateway.name}
    if route.gateway.namespace is not None:
        parent["namespace"] = route.gateway.namespace
    if route.gateway.section_name is not None:
        parent["sectionName"] = route.gateway.section_name
    spec: dict[str, Any] = {"parentRefs": [parent]}
    if route.hostnames:
        spec["hostnames"] = list(route.hostnames)
    spec["rules"] = route_rules(endpoint, route, admission, cohort_value,
                                labels or ModelLabels(model=endpoint.served_model_name))
    annotations = {ADMISSION_ANNOTATION: str(admission), REASON_ANNOTATION: _one_line(reason),
                   CHANGED_AT_ANNOTATION: changed_at}
    object_labels = {"app.kubernetes.io/managed-by": "kimi-ops"}
    if endpoint.pair is not None:
        object_labels[SERVICE_LABEL] = endpoint.pair.service
        annotations[SIDE_ANNOTATION] = endpoint.name
    else:
        object_labels[ENDPOINT_LABEL] = endpoint.name
    obj: dict[str, Any] = {
        "apiVersion": ROUTE_API_VERSION,
        "kind": ROUTE_KIND,
        "metadata": {"name": route.route_name(endpoint.name), "namespace": endpoint.namespace,
                     "labels": object_labels, "annotations": annotations},
        "spec": spec,
    }
    errors = route_errors(obj)
    if errors:
        raise InvalidManifest(errors)
    return obj




def _running_release(rest: Rest, endpoint: EndpointSettings, name: str) -> str | None:
    """The release the cluster runs on endpoint ``name`` (its workload object's ``kimi-ops.io/release``)."""
    kind = "InferenceEndpointConfig" if endpoint.kind == "hyperpod" else "Deployment"
    try:
        found = rest.get(object_path(kind, name, endpoint.namespace))
    except Exception as exc:
        raise ClusterError(f"reading {kind}/{name} in {endpoint.namespace} failed: {api_error(exc)}") from exc
    release = ((found or {}).get("metadata") or {}).get("annotations", {}).get(RELEASE_ANNOTATION)
    return str(release) if release else None


def model_labels(rest: Rest, endpoint: EndpointSettings) -> ModelLabels:
    """What every answer will say answered it: the release running on the endpoint (else its served model), and
    the fallback's name (a pair's other side: the release running there)."""
    route = route_settings(endpoint)
    model = (route.model_backend(endpoint.name).model_name or _running_release(rest, endpoint, endpoint.name)
             or endpoint.served_model_name)
    if endpoint.pair is not None and not endpoint.smaller_fallback:
        return ModelLabels(model=model, fallback=_running_release(rest, endpoint, endpoint.pair.partner)
                           or f"{endpoint.pair.partner} ({endpoint.served_model_name})")
    return ModelLabels(model=model)


def route_path(endpoint: EndpointSettings) -> str:
    return object_path(ROUTE_KIND, route_settings(endpoint).route_name(endpoint.name), endpoint.namespace)


def apply_route(rest: Rest, endpoint: EndpointSettings, admission: Admission, reason: str, changed_at: str) -> RouteStatus:
    """Render, validate and server-side apply the route; returns what the API server stored."""
    # Each closing makes a new token: whoever held the last deployment's is an ordinary user from now on.
    try:
        live = rest.get(route_path(endpoint)) if route_settings(endpoint).cohort_header.source == "token" else None
    except Exception as exc:
        raise ClusterError(f"reading {ROUTE_KIND}/{endpoint.name} in {endpoint.namespace} failed: {api_error(exc)}") from exc
    token = cohorts.cohort_token(rest, endpoint, rotate=admission.state is AdmissionState.CLOSED, live=live)
    obj = render_route(endpoint, admission, reason, changed_at, token, model_labels(rest, endpoint))
    try:
        # force: this manager is the route's only writer by design; a hand edit of the weights is taken back.
        stored = rest.apply(obj, manager=ROUTE_MANAGER, force=True)
    except Exception as exc:
        # Only a 404 says the kind is unknown to the API server; any other failure would be misdirected by the hint.
        hint = " (are the Gateway API CRDs installed?)" if getattr(exc, "status", None) == 404 else ""
        raise ClusterError(f"applying {ROUTE_KIND}/{endpoint.name} in {endpoint.namespace} failed: {api_error(exc)}{hint}"
                           ) from exc
    return read_route_status(stored, endpoint)


def current_route(rest: Rest, endpoint: EndpointSettings) -> RouteStatus | None:
    """The route as the cluster has it, or None when the endpoint has no route (configured or in the cluster)."""
    if endpoint.route is None:
        return None
    try:
        obj = rest.get(route_path(endpoint))
    except Exception as exc:
        raise ClusterError(f"reading {ROUTE_KIND}/{endpoint.name} in {endpoint.namespace} failed: {api_error(exc)}") from exc
    return None if obj is None else read_route_status(obj, endpoint)


def next_route_status(rest: Rest, endpoint: EndpointSettings, seen: RouteStatus, seconds: float) -> RouteStatus | None:
    """The route once the cluster's copy differs from ``seen`` (the gateway wrote its verdict), watched with the
    Kubernetes watch API; after ``seconds`` without a change, the route as it is then."""
    if endpoint.route is None:
        return None
    name = route_settings(endpoint).route_name(endpoint.name)
    try:
        for obj in versions(rest.api_client, ROUTE_KIND, name, endpoint.namespace, seconds=seconds,
                            stop=threading.Event()):
            status = read_route_status(obj, endpoint)
            if status != seen:
                return status
    except WatchUnavailable:  # no watch permission: the read below, after the time a poll would have waited
        time.sleep(seconds)
    return current_route(rest, endpoint)
