"""Gateway API routes to the model backends besides kimi-ops's own, for the infrastructure gate's ``cluster.doors``.

The model backends are the Services and InferencePools that reach the model
pods: the route's configured model backend, and every Service or pool (in the
cluster or in this release) whose selector picks the model pods' labels.

A side door is a route besides kimi-ops's own HTTPRoute whose rule sends
requests (weight above 0) to one of them, or a grant that lets one in:

* any ``HTTPRoute``, ``GRPCRoute``, ``TCPRoute`` or ``TLSRoute`` in the
  endpoint's namespace (a TCP or TLS passthrough route reaches the model
  Service's port as surely as an HTTP one);
* such a route in another namespace whose backendRef names
  the endpoint's namespace, when a ``ReferenceGrant`` there lets that kind from
  that namespace refer to the backend. The Gateway API honours a cross-namespace
  backendRef only under such a grant (GEP-709): without one the gateway refuses
  the reference (``RefNotPermitted``), so a route alone is no door, nor is a
  grant that does not cover a model backend;
* a ``ReferenceGrant`` in the endpoint's namespace that lets routes of those
  kinds from another namespace refer to a model backend, while no route there
  uses it yet: anyone who may write a route in that namespace has a door.

Only the Gateway API's route kinds and ReferenceGrant are read (their CRDs, from
the standard and experimental channels, are what the tests validate against).
ReferenceGrants are read as ``v1beta1``, which every Gateway API release serves
(``v1`` only since 1.5). TCPRoute and TLSRoute are read as ``v1`` (standard since
1.6 and 1.5), else as ``v1alpha2``, which every experimental channel before
serves. A kind the cluster does not serve (its CRD not installed) holds no door.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from bot.adapters.cluster.rest import Rest, collection_path, meta_of, spec_of
from bot.config import EndpointSettings
from bot.domain.doors import DoorPath

ROUTE_KINDS = ("HTTPRoute", "GRPCRoute", "TCPRoute", "TLSRoute")
OLDER_VERSIONS = {"TCPRoute": "v1alpha2", "TLSRoute": "v1alpha2"}
"""The version an install from before the kind's ``v1`` serves (the experimental channel)."""
GATEWAY_GROUP = "gateway.networking.k8s.io"
POOL_GROUP = "inference.networking.k8s.io"
Target = tuple[str, str, str]  # (group, kind, name) of a backend in the endpoint's namespace


def served_items(rest: Rest, path: str, *older: str) -> list[dict[str, Any]]:
    """The objects at ``path`` (else at each ``older`` path in turn); none when the cluster serves none of them
    (a 404: the kind's CRD is not installed, or not at that version)."""
    for where in (path, *older):
        try:
            return rest.items(where)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return []


def routes_of(rest: Rest, kind: str, namespace: str) -> list[dict[str, Any]]:
    """The routes of ``kind`` in ``namespace``, at ``v1`` or, on an older install, at the version it serves."""
    path = collection_path(kind, namespace)
    older = OLDER_VERSIONS.get(kind)
    return served_items(rest, path, *([path.replace(f"/{GATEWAY_GROUP}/v1/", f"/{GATEWAY_GROUP}/{older}/", 1)]
                                      if older else []))


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A selector (plain, or ``matchLabels``) that names labels and picks pods with ``labels``."""
    nested = selector.get("matchLabels")
    wanted: dict[str, Any] = nested if isinstance(nested, dict) else selector
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


@dataclass(frozen=True)
class ModelBackends:
    """The backends in the endpoint's namespace that reach the model pods."""

    services: frozenset[str]
    pools: frozenset[str]

    def holds(self, target: Target) -> bool:
        group, kind, name = target
        if (group, kind) == ("", "Service"):
            return name in self.services
        return (group, kind) == (POOL_GROUP, "InferencePool") and name in self.pools

    def describe(self, target: Target) -> str:
        return f"{target[1]} {target[2]}"


def model_backends(rest: Rest, endpoint: EndpointSettings, objects: list[dict[str, Any]],
                   labels: dict[str, str], services: list[dict[str, Any]]) -> ModelBackends:
    """The route's model backend, and every Service and InferencePool (running or rendered) selecting ``labels``."""
    pools = served_items(rest, collection_path("InferencePool", endpoint.namespace))
    rendered = [o for o in objects if o.get("kind") in ("Service", "InferencePool")]
    service_names = {str(meta_of(s).get("name")) for s in [*services, *(o for o in rendered if o["kind"] == "Service")]
                     if _matches(spec_of(s).get("selector") or {}, labels)}
    pool_names = {str(meta_of(p).get("name")) for p in [*pools, *(o for o in rendered if o["kind"] == "InferencePool")]
                  if _matches(spec_of(p).get("selector") or {}, labels)}
    if endpoint.route is not None:
        backend = endpoint.route.model_backend(endpoint.name)
        (pool_names if backend.kind == "InferencePool" else service_names).add(backend.name)
    return ModelBackends(frozenset(service_names), frozenset(pool_names))


def _sent_to(route: dict[str, Any], route_namespace: str) -> list[tuple[str, Target]]:
    """(namespace, target) of every backendRef that takes requests (weight above 0)."""
    found: list[tuple[str, Target]] = []
    for rule in spec_of(route).get("rules") or []:
        for ref in rule.get("backendRefs") or []:
            if int(ref.get("weight", 1)) <= 0:
                continue
            target = (str(ref.get("group", "")), str(ref.get("kind", "Service")), str(ref.get("name")))
            found.append((str(ref.get("namespace") or route_namespace), target))
    return found


def _grant_covers(grant: dict[str, Any], target: Target) -> bool:
    """A ReferenceGrant's ``to`` lets references reach ``target`` (no name: every object of that group and kind)."""
    return any(str(to.get("group", "")) == target[0] and to.get("kind") == target[1]
               and to.get("name") in (None, "", target[2]) for to in spec_of(grant).get("to") or [])


def _same_namespace(rest: Rest, endpoint: EndpointSettings, backends: ModelBackends) -> list[DoorPath]:
    namespace = endpoint.namespace
    ours = endpoint.route.route_name(endpoint.name) if endpoint.route is not None else None
    paths: list[DoorPath] = []
    for kind in ROUTE_KINDS:
        for route in routes_of(rest, kind, namespace):
            name = str(meta_of(route).get("name"))
            if kind == "HTTPRoute" and name == ours:
                continue
            hits = sorted({backends.describe(t) for ns, t in _sent_to(route, namespace)
                           if ns == namespace and backends.holds(t)})
            if hits:
                paths.append(DoorPath(kind, f"{namespace}/{name}", f"sends requests to {', '.join(hits)} outside "
                                                                   "kimi-ops's admission; delete it"))
    return paths


def _model_targets(backends: ModelBackends) -> list[Target]:
    return [*(("", "Service", n) for n in sorted(backends.services)),
            *((POOL_GROUP, "InferencePool", n) for n in sorted(backends.pools))]


def _through_grants(rest: Rest, endpoint: EndpointSettings, backends: ModelBackends) -> list[DoorPath]:
    """Routes in other namespaces a ReferenceGrant lets reach a model backend, and each such grant no route uses yet.

    kimi-ops's own route lives in the endpoint's namespace, beside the model backends, so it never needs a grant;
    a grant ``from`` that namespace changes nothing (same-namespace references need none) and is no door.
    """
    namespace = endpoint.namespace
    routes: dict[tuple[str, str], list[dict[str, Any]]] = {}
    paths: dict[tuple[str, str], DoorPath] = {}
    unused: list[DoorPath] = []
    for grant in served_items(rest, collection_path("ReferenceGrant", namespace)):
        grant_name = f"{namespace}/{meta_of(grant).get('name')}"
        covered = sorted({backends.describe(t) for t in _model_targets(backends) if _grant_covers(grant, t)})
        idle: list[str] = []
        for source in spec_of(grant).get("from") or []:
            kind, source_ns = str(source.get("kind")), str(source.get("namespace"))
            if source.get("group") != GATEWAY_GROUP or kind not in ROUTE_KINDS or source_ns == namespace or not covered:
                continue
            if (kind, source_ns) not in routes:
                routes[(kind, source_ns)] = routes_of(rest, kind, source_ns)
            used = False
            for route in routes[(kind, source_ns)]:
                hits = sorted({backends.describe(t) for ns, t in _sent_to(route, source_ns)
                               if ns == namespace and backends.holds(t) and _grant_covers(grant, t)})
                key = (kind, f"{source_ns}/{meta_of(route).get('name')}")
                used = used or bool(hits)
                if hits and key not in paths:
                    paths[key] = DoorPath(kind, key[1], f"sends requests to {', '.join(hits)} in {namespace}, allowed by "
                                                        f"ReferenceGrant {grant_name}, outside kimi-ops's admission; "
                                                        f"delete the route or take {', '.join(hits)} out of the grant")
            if not used:
                idle.append(f"{kind}s in namespace {source_ns}")
        if idle:
            unused.append(DoorPath("ReferenceGrant", grant_name, f"lets {' and '.join(idle)} send requests to "
                                   f"{', '.join(covered)} outside kimi-ops's admission, though no route does yet; "
                                   f"delete the grant or take {', '.join(covered)} out of its spec.to"))
    return [*paths.values(), *unused]


def route_doors(rest: Rest, endpoint: EndpointSettings, backends: ModelBackends) -> list[DoorPath]:
    """Every route besides kimi-ops's own that sends requests to a model backend, and every grant that would let one."""
    return [*_same_namespace(rest, endpoint, backends), *_through_grants(rest, endpoint, backends)]
