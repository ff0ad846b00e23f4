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
from importlib import resources
from typing import Any

from bot.adapters.cluster.errors import ClusterError, InvalidManifest
from bot.adapters.cluster.rest import Rest, api_error, object_path
from bot.adapters.cluster.validate import crd_validator, schema_errors
from bot.config import EndpointSettings, PairSide
from bot.domain.admission import (
    Admission,
    AdmissionError,
    AdmissionState,
    ParentCondition,
    ParentStatus,
    RouteStatus,
    parse_admission,
)
from bot.route_config import RouteSettings, ServiceBackend

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
SIDE_ANNOTATION = "kimi-ops.io/admission-side"
SCHEMA_FILE = "httproute-v1.schema.json"
MAX_REASON = 500


class RouteNotConfigured(Exception):
    """The endpoint's settings have no ``route`` block, so kimi-ops keeps no route for it."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(f"endpoint {endpoint} has no route in its settings; add a route: block "
                         "(gateway, optional fallback and cohort header) to let kimi-ops steer its traffic")


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


def _settings(endpoint: EndpointSettings) -> RouteSettings:
    if endpoint.route is None:
        raise RouteNotConfigured(endpoint.name)
    return endpoint.route


def _ref(backend: ServiceBackend, weight: int) -> dict[str, Any]:
    return {"group": "", "kind": "Service", "name": backend.name, "port": backend.port, "weight": weight}


def _split(route: RouteSettings, endpoint: EndpointSettings, percent: int) -> list[dict[str, Any]]:
    refs = [_ref(route.model_backend(endpoint.name), percent)]
    if route.fallback is not None:
        refs.append(_ref(route.fallback, 100 - percent))
    return refs


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_REASON else flat[: MAX_REASON - 1] + "…"


def render_route(endpoint: EndpointSettings, admission: Admission, reason: str, changed_at: str) -> dict[str, Any]:
    """The endpoint's HTTPRoute for ``admission``; raises :class:`InvalidManifest` when it cannot be valid."""
    route = _settings(endpoint)
    if admission.needs_fallback and route.fallback is None:
        raise InvalidManifest([
            f"{ROUTE_KIND}/{endpoint.name} spec.rules: a share of {admission} needs route.fallback to send the other "
            f"{100 - admission.percent}% to; configure a fallback, or use closed, internal or open"])
    parent: dict[str, Any] = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": route.gateway.name}
    if route.gateway.namespace is not None:
        parent["namespace"] = route.gateway.namespace
    if route.gateway.section_name is not None:
        parent["sectionName"] = route.gateway.section_name
    everything = {"type": "PathPrefix", "value": "/"}
    cohort = {"type": "Exact", "name": route.cohort_header.name, "value": route.cohort_header.value}
    spec: dict[str, Any] = {"parentRefs": [parent]}
    if route.hostnames:
        spec["hostnames"] = list(route.hostnames)
    spec["rules"] = [
        {"matches": [{"path": dict(everything), "headers": [cohort]}],
         "backendRefs": _split(route, endpoint, admission.percent_for(cohort=True))},
        {"matches": [{"path": dict(everything)}],
         "backendRefs": _split(route, endpoint, admission.percent_for(cohort=False))},
    ]
    annotations = {ADMISSION_ANNOTATION: str(admission), REASON_ANNOTATION: _one_line(reason),
                   CHANGED_AT_ANNOTATION: changed_at}
    labels = {"app.kubernetes.io/managed-by": "kimi-ops"}
    if endpoint.pair is not None:
        labels[SERVICE_LABEL] = endpoint.pair.service
        annotations[SIDE_ANNOTATION] = endpoint.name
    else:
        labels[ENDPOINT_LABEL] = endpoint.name
    obj: dict[str, Any] = {
        "apiVersion": ROUTE_API_VERSION,
        "kind": ROUTE_KIND,
        "metadata": {"name": route.route_name(endpoint.name), "namespace": endpoint.namespace,
                     "labels": labels, "annotations": annotations},
        "spec": spec,
    }
    errors = route_errors(obj)
    if errors:
        raise InvalidManifest(errors)
    return obj


# -- reading a route back -------------------------------------------------------------------------------------


def _weight(ref: dict[str, Any]) -> int:
    try:
        return int(ref.get("weight", 1))  # the CRD's default weight is 1
    except (TypeError, ValueError):
        return 0


def _same_service(ref: dict[str, Any], backend: ServiceBackend, namespace: str) -> bool:
    return (ref.get("group", "") == "" and ref.get("kind", "Service") == "Service"
            and ref.get("namespace", namespace) == namespace
            and ref.get("name") == backend.name and ref.get("port") == backend.port)


def _rule_percent(rule: dict[str, Any], route: RouteSettings, endpoint: EndpointSettings,
                  problems: list[str], where: str) -> int:
    """The share (0-100) of the rule's traffic its weights send to the model Service."""
    model = route.model_backend(endpoint.name)
    to_model = to_fallback = 0
    for ref in rule.get("backendRefs") or []:
        if not isinstance(ref, dict):
            continue
        if _same_service(ref, model, endpoint.namespace):
            to_model += _weight(ref)
        elif route.fallback is not None and _same_service(ref, route.fallback, endpoint.namespace):
            to_fallback += _weight(ref)
        elif _weight(ref) > 0:
            problems.append(f"{where} sends traffic to {ref.get('kind', 'Service')} {ref.get('name')}:{ref.get('port')}, "
                            "which is neither the model nor the fallback")
            to_fallback += _weight(ref)
    total = to_model + to_fallback
    return round(100 * to_model / total) if total else 0


def _is_cohort(match: dict[str, Any], route: RouteSettings) -> bool:
    wanted = route.cohort_header
    return any(isinstance(h, dict) and str(h.get("name", "")).lower() == wanted.name.lower()
               and h.get("value") == wanted.value and h.get("type", "Exact") == "Exact"
               for h in match.get("headers") or [])


def _catches_all(match: dict[str, Any]) -> bool:
    path = match.get("path") or {"type": "PathPrefix", "value": "/"}
    return (not match.get("headers") and not match.get("queryParams") and not match.get("method")
            and path.get("type", "PathPrefix") == "PathPrefix" and path.get("value", "/") == "/")


def admission_from_rules(obj: dict[str, Any], endpoint: EndpointSettings) -> tuple[Admission | None, list[str]]:
    """The admission the route's rules and weights give, or None with the reasons it fits no state."""
    route = _settings(endpoint)
    problems: list[str] = []
    cohort_percent: int | None = None
    default_percent: int | None = None
    for index, rule in enumerate((obj.get("spec") or {}).get("rules") or []):
        matches = rule.get("matches") or [{}]  # no matches: the CRD's default, PathPrefix /
        where = f"rule {index + 1}"
        if cohort_percent is None and any(_is_cohort(m, route) for m in matches):
            cohort_percent = _rule_percent(rule, route, endpoint, problems, where)
        elif default_percent is None and any(_catches_all(m) for m in matches):
            default_percent = _rule_percent(rule, route, endpoint, problems, where)
    if default_percent is None:
        return None, [*problems, "no rule takes ordinary requests (PathPrefix / without header matches)"]
    if cohort_percent is None:
        cohort_percent = default_percent
    if problems:
        return None, problems
    if default_percent == 100 and cohort_percent == 100:
        return Admission.open(), []
    if cohort_percent == 0 and default_percent == 0:
        return Admission.closed(), []
    if cohort_percent == 100 and default_percent == 0:
        return Admission.internal(), []
    if cohort_percent == 100:
        return Admission.share(default_percent), []
    return None, [f"the rules send {cohort_percent}% of the cohort and {default_percent}% of other requests to Kimi K3, "
                  "which is no admission state kimi-ops writes"]


def _parents(obj: dict[str, Any]) -> tuple[ParentStatus, ...]:
    found: list[ParentStatus] = []
    namespace = str((obj.get("metadata") or {}).get("namespace") or "")
    for parent in ((obj.get("status") or {}).get("parents") or []):
        ref = parent.get("parentRef") or {}
        gateway = f"{ref.get('namespace') or namespace}/{ref.get('name', '?')}"
        if ref.get("sectionName"):
            gateway += f"/{ref['sectionName']}"
        conditions = tuple(
            ParentCondition(type=str(c.get("type", "")), status=str(c.get("status", "Unknown")),
                            reason=str(c.get("reason") or ""), message=str(c.get("message") or ""),
                            observed_generation=int(c["observedGeneration"]) if c.get("observedGeneration") is not None else None)
            for c in parent.get("conditions") or [] if isinstance(c, dict))
        found.append(ParentStatus(gateway=gateway, controller=str(parent.get("controllerName") or ""), conditions=conditions))
    return tuple(found)


def mirrored(endpoint: EndpointSettings) -> EndpointSettings:
    """A pair side's partner as it writes the shared route: the two Services swapped (no other setting is read)."""
    route, pair = _settings(endpoint), endpoint.pair
    assert pair is not None
    return endpoint.model_copy(update={
        "name": pair.partner, "pair": PairSide(service=pair.service, partner=endpoint.name),
        "route": route.model_copy(update={"backend": route.fallback, "fallback": route.model_backend(endpoint.name)})})


def _complement(admission: Admission | None) -> Admission | None:
    """The other side's admission: everything to one side is nothing to the other; a ramp between them is neither."""
    if admission is None or admission.state not in (AdmissionState.CLOSED, AdmissionState.OPEN):
        return None
    return Admission.open() if admission.state is AdmissionState.CLOSED else Admission.closed()


def read_route_status(obj: dict[str, Any], endpoint: EndpointSettings) -> RouteStatus:
    """What the route in the cluster says: annotation, rules and weights, parent conditions.

    For a pair side whose partner wrote the route last, the partner's reading is turned around: the partner
    closed is this side open and the reverse; a ramp between them is no single admission of this side.
    """
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if endpoint.pair is not None and annotations.get(SIDE_ANNOTATION) == endpoint.pair.partner:
        theirs = read_route_status(obj, mirrored(endpoint))
        mine = _complement(theirs.effective)
        mid_ramp = [] if mine is not None or theirs.effective is None else [
            f"mid-ramp: {endpoint.pair.partner} is at {theirs.effective}"]
        return RouteStatus(name=theirs.name, namespace=theirs.namespace, annotated=_complement(theirs.annotated),
                           effective=mine, reason=theirs.reason, changed_at=theirs.changed_at,
                           generation=theirs.generation, parents=theirs.parents, problems=(*theirs.problems, *mid_ramp))
    problems: list[str] = []
    annotated: Admission | None = None
    written = annotations.get(ADMISSION_ANNOTATION)
    if written is None:
        problems.append(f"no {ADMISSION_ANNOTATION} annotation")
    else:
        try:
            annotated = parse_admission(str(written))
        except AdmissionError as exc:
            problems.append(f"annotation {ADMISSION_ANNOTATION}: {exc}")
    effective, rule_problems = admission_from_rules(obj, endpoint)
    problems += rule_problems
    if annotated is not None and effective is not None and annotated != effective:
        problems.append(f"the annotation says {annotated} but the rules give {effective}")
    generation = meta.get("generation")
    return RouteStatus(
        name=str(meta.get("name", _settings(endpoint).route_name(endpoint.name))),
        namespace=str(meta.get("namespace", endpoint.namespace)),
        annotated=annotated,
        effective=effective,
        reason=annotations.get(REASON_ANNOTATION),
        changed_at=annotations.get(CHANGED_AT_ANNOTATION),
        generation=int(generation) if generation is not None else None,
        parents=_parents(obj),
        problems=tuple(problems),
    )


def route_path(endpoint: EndpointSettings) -> str:
    return object_path(ROUTE_KIND, _settings(endpoint).route_name(endpoint.name), endpoint.namespace)


def apply_route(rest: Rest, endpoint: EndpointSettings, admission: Admission, reason: str, changed_at: str) -> RouteStatus:
    """Render, validate and server-side apply the route; returns what the API server stored."""
    obj = render_route(endpoint, admission, reason, changed_at)
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
