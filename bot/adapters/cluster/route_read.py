"""Reading an HTTPRoute back: the admission its rules and weights give, and each parent Gateway's verdict.

Nothing written by kimi-ops alone is trusted: the state comes from the
annotation *and* from the rules and weights, and each parent's ``Accepted`` /
``ResolvedRefs`` conditions come from ``status.parents`` as the Gateway's
controller wrote them. The cohort rule is recognised by its header (and, for a
fixed or JWT cohort, its value; a token cohort's value is never read here).
"""

from __future__ import annotations

from typing import Any

from bot.adapters.cluster.route_names import (
    ADMISSION_ANNOTATION,
    CHANGED_AT_ANNOTATION,
    REASON_ANNOTATION,
    SIDE_ANNOTATION,
    route_settings,
)
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
from bot.route_config import Backend, RouteSettings


def _weight(ref: dict[str, Any]) -> int:
    try:
        return int(ref.get("weight", 1))  # the CRD's default weight is 1
    except (TypeError, ValueError):
        return 0


def _same_service(ref: dict[str, Any], backend: Backend, namespace: str) -> bool:
    """The reference names ``backend`` (a Service with its port, or an InferencePool)."""
    same_kind = ref.get("group", "") == backend.group and ref.get("kind", "Service") == backend.kind
    same_port = backend.kind != "Service" or ref.get("port") == backend.port
    return same_kind and same_port and ref.get("namespace", namespace) == namespace and ref.get("name") == backend.name


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
        elif _pair_fallback(endpoint, ref):
            to_fallback += _weight(ref)  # a pair side's failover: its users on the service's smaller fallback
        elif _weight(ref) > 0:
            problems.append(f"{where} sends traffic to {ref.get('kind', 'Service')} {ref.get('name')}:{ref.get('port')}, "
                            "which is neither the model nor the fallback")
            to_fallback += _weight(ref)
    total = to_model + to_fallback
    return round(100 * to_model / total) if total else 0


def _pair_fallback(endpoint: EndpointSettings, ref: dict[str, Any]) -> bool:
    """The reference names the service's smaller fallback of a pair side (where its failover sends users)."""
    pair = endpoint.pair
    return pair is not None and pair.fallback is not None and _same_service(ref, pair.fallback, endpoint.namespace)


def _on_pair_fallback(obj: dict[str, Any], endpoint: EndpointSettings) -> bool:
    """Some rule sends requests to the service's smaller fallback: the side that wrote it failed over."""
    return any(_pair_fallback(endpoint, ref) and _weight(ref) > 0 for rule in (obj.get("spec") or {}).get("rules") or []
               for ref in rule.get("backendRefs") or [] if isinstance(ref, dict))


def _is_cohort(match: dict[str, Any], route: RouteSettings) -> bool:
    wanted = route.cohort_header
    # A token cohort's value lives in its Secret and changes with every closing: the header name says which rule.
    return any(isinstance(h, dict) and str(h.get("name", "")).lower() == wanted.name.lower()
               and (wanted.source == "token" or h.get("value") == wanted.value) and h.get("type", "Exact") == "Exact"
               for h in match.get("headers") or [])


def _needs_kimi(match: dict[str, Any], route: RouteSettings) -> bool:
    wanted = route.requires_header
    return any(isinstance(h, dict) and str(h.get("name", "")).lower() == wanted.name.lower()
               for h in match.get("headers") or [])


def _catches_all(match: dict[str, Any]) -> bool:
    path = match.get("path") or {"type": "PathPrefix", "value": "/"}
    return (not match.get("headers") and not match.get("queryParams") and not match.get("method")
            and path.get("type", "PathPrefix") == "PathPrefix" and path.get("value", "/") == "/")


def admission_from_rules(obj: dict[str, Any], endpoint: EndpointSettings) -> tuple[Admission | None, list[str]]:
    """The admission the route's rules and weights give, or None with the reasons it fits no state."""
    route = route_settings(endpoint)
    problems: list[str] = []
    cohort_percent: int | None = None
    default_percent: int | None = None
    for index, rule in enumerate((obj.get("spec") or {}).get("rules") or []):
        matches = rule.get("matches") or [{}]  # no matches: the CRD's default, PathPrefix /
        where = f"rule {index + 1}"
        if any(_needs_kimi(m, route) for m in matches):
            continue  # the requests that need Kimi K3 follow the admission (route_rules); they say nothing of it
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
    route, pair = route_settings(endpoint), endpoint.pair
    assert pair is not None
    return endpoint.model_copy(update={
        "name": pair.partner, "pair": PairSide(service=pair.service, partner=endpoint.name, fallback=pair.fallback),
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
        # Their users on the service's smaller fallback are on neither side: this one is closed too.
        on_fallback = _on_pair_fallback(obj, endpoint)
        mine = Admission.closed() if on_fallback else _complement(theirs.effective)
        mid_ramp = [] if mine is not None or theirs.effective is None else [
            f"mid-ramp: {endpoint.pair.partner} is at {theirs.effective}"]
        return RouteStatus(name=theirs.name, namespace=theirs.namespace,
                           annotated=Admission.closed() if on_fallback else _complement(theirs.annotated),
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
        name=str(meta.get("name", route_settings(endpoint).route_name(endpoint.name))),
        namespace=str(meta.get("namespace", endpoint.namespace)),
        annotated=annotated,
        effective=effective,
        reason=annotations.get(REASON_ANNOTATION),
        changed_at=annotations.get(CHANGED_AT_ANNOTATION),
        generation=int(generation) if generation is not None else None,
        parents=_parents(obj),
        problems=tuple(problems),
    )
