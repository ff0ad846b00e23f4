"""Every way to an endpoint's model pods, read from the cluster for the infrastructure gate's ``cluster.doors``.

The model pods are the ones the release's objects select (HyperPod: the
operator's ``app: <name>`` label; EKS: the Deployment's pod template labels).
:func:`find_doors` lists, in the endpoint's namespace:

* the intended door: the route (its HTTPRoute and Gateway) or the declared
  application layer of an endpoint without a route;
* Services of type ``LoadBalancer`` or ``NodePort`` (or with ``externalIPs``)
  that select the model pods;
* Ingresses that send requests to a Service selecting the model pods, and
  routes (HTTP, gRPC, TCP, TLS) other than kimi-ops's own that send requests to a
  model Service or InferencePool, in this namespace or from another one through
  a ReferenceGrant, and such a grant no route uses yet (:mod:`.route_doors`);
* a SageMaker endpoint and the operator's load balancer: the ones this release
  declares (``door:``), and one the running ``InferenceEndpointConfig`` still
  registers;
* the ingress NetworkPolicies selecting the model pods, this release's own in
  place of the cluster's copy: none at all is a path for every pod of the
  cluster, and a policy (any policy: they add up) admitting anyone beyond the
  door, kimi-ops and the metrics scraper is a path for those.

Only reads; the judgement is :func:`bot.domain.doors.door_check`'s.
"""

from __future__ import annotations

from typing import Any

from bot.adapters.cluster.policies import front_door, hyperpod_pod_selector
from bot.adapters.cluster.rest import Rest, collection_path, meta_of, object_path, spec_of
from bot.adapters.cluster.route_doors import model_backends, route_doors
from bot.config import EndpointSettings
from bot.domain.doors import DoorPath, PodPeer, wide_peers

IEC_KIND = "InferenceEndpointConfig"
OPERATOR_LABELS = {"deploying-service": "hyperpod-inference"}
"""What the HyperPod operator puts on its pods besides ``app`` (see :mod:`.policies`)."""


def model_pod_labels(endpoint: EndpointSettings, objects: list[dict[str, Any]]) -> dict[str, str]:
    """The labels every model pod of this release carries."""
    if endpoint.kind == "hyperpod":
        return {**OPERATOR_LABELS, **hyperpod_pod_selector(endpoint)}
    deployment = next((o for o in objects if o.get("kind") == "Deployment"), {})
    labels: dict[str, str] = (meta_of(spec_of(deployment).get("template") or {}).get("labels") or {})
    return dict(labels)


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A plain label selector (a Service's) picks a pod with ``labels``; an empty one picks none (no endpoints)."""
    return bool(selector) and all(labels.get(k) == v for k, v in (selector or {}).items())


def _policy_selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    """A NetworkPolicy's ``podSelector`` (empty: every pod) picks the model pods; expressions: taken to pick them."""
    wanted = (spec_of(policy).get("podSelector") or {}).get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def _limits_ingress(policy: dict[str, Any]) -> bool:
    spec = spec_of(policy)
    types = spec.get("policyTypes")
    return "Ingress" in types if types else True  # without policyTypes a policy always limits ingress


def _ingress_services(ingress: dict[str, Any]) -> list[tuple[str, str]]:
    """(Service name, where) for every backend of an Ingress."""
    spec = spec_of(ingress)
    found: list[tuple[str, str]] = []
    default = ((spec.get("defaultBackend") or {}).get("service") or {}).get("name")
    if default:
        found.append((str(default), "every request"))
    for rule in spec.get("rules") or []:
        host = rule.get("host") or "*"
        for path in ((rule.get("http") or {}).get("paths") or []):
            name = ((path.get("backend") or {}).get("service") or {}).get("name")
            if name:
                found.append((str(name), f"{host}{path.get('path') or '/'}"))
    return found


def _owned_by_endpoint(obj: dict[str, Any], endpoint: EndpointSettings) -> bool:
    owners = meta_of(obj).get("ownerReferences") or []
    return any(ref.get("kind") == IEC_KIND and ref.get("name") == endpoint.name for ref in owners)


def _the_door(endpoint: EndpointSettings) -> list[DoorPath]:
    front = front_door(endpoint)
    if endpoint.route is not None and front is not None:
        gateway = endpoint.route.gateway
        return [DoorPath("route", f"HTTPRoute {endpoint.namespace}/{endpoint.route.route_name(endpoint.name)}",
                         f"through Gateway {gateway.namespace or endpoint.namespace}/{gateway.name} ({front.describe()})",
                         door=True)]
    if front is not None:
        return [DoorPath("application layer", "", f"{front.describe()}, which enforces admission", door=True)]
    return []


def _public_doors(rest: Rest, endpoint: EndpointSettings, objects: list[dict[str, Any]]) -> list[DoorPath]:
    """The SageMaker endpoint and load balancer this release declares, and a SageMaker endpoint still registered."""
    if endpoint.kind != "hyperpod":
        return []
    paths: list[DoorPath] = []
    rendered = next((o for o in objects if o.get("kind") == IEC_KIND), {})
    declared = str(spec_of(rendered).get("endpointName") or "")
    if declared:
        paths.append(DoorPath("SageMaker endpoint", declared, "declared in door.sagemaker_endpoint", declared=True))
    if "loadBalancer" in spec_of(rendered) and endpoint.door.load_balancer is not None:
        paths.append(DoorPath("load balancer", "", "the operator's ALB from "
                              f"{', '.join(endpoint.door.load_balancer.source_cidrs)}, declared in door.load_balancer",
                              declared=True))
    live = rest.get(object_path(IEC_KIND, endpoint.name, endpoint.namespace))
    if live is not None:
        registered = ((live.get("status") or {}).get("endpoints") or {}).get("sagemaker")
        running = str(spec_of(live).get("endpointName") or "")
        if (registered or running) and running != declared:
            state = f" ({registered.get('state')})" if isinstance(registered, dict) and registered.get("state") else ""
            paths.append(DoorPath("SageMaker endpoint", running or "(registered)",
                                  f"the running InferenceEndpointConfig registers it{state}; delete it (this release "
                                  "renders endpointName \"\")"))
    return paths


def _service_doors(services: list[dict[str, Any]], labels: dict[str, str]) -> list[DoorPath]:
    paths: list[DoorPath] = []
    for service in services:
        spec = spec_of(service)
        if not _selects(spec.get("selector"), labels):
            continue
        kind = str(spec.get("type") or "ClusterIP")
        name = str(meta_of(service).get("name"))
        if kind in ("LoadBalancer", "NodePort"):
            paths.append(DoorPath(f"{kind} Service", name, "exposes the model pods outside the cluster"))
        if spec.get("externalIPs"):
            paths.append(DoorPath("Service", name, f"external IPs {', '.join(map(str, spec['externalIPs']))}"))
    return paths


def _ingress_doors(rest: Rest, endpoint: EndpointSettings, model_services: frozenset[str]) -> list[DoorPath]:
    """Ingresses to a Service of the model pods (an Ingress the operator owns for a declared ALB is that load
    balancer, already listed)."""
    namespace = endpoint.namespace
    paths: list[DoorPath] = []
    for ingress in rest.items(collection_path("Ingress", namespace)):
        if endpoint.door.load_balancer is not None and _owned_by_endpoint(ingress, endpoint):
            continue
        hits = [f"{where} → Service {name}" for name, where in _ingress_services(ingress) if name in model_services]
        if hits:
            paths.append(DoorPath("Ingress", str(meta_of(ingress).get("name")), "; ".join(hits)))
    return paths


def _policy_doors(rest: Rest, endpoint: EndpointSettings, objects: list[dict[str, Any]],
                  labels: dict[str, str]) -> list[DoorPath]:
    namespace = endpoint.namespace
    rendered = [o for o in objects if o.get("kind") == "NetworkPolicy"]
    ours = {str(meta_of(o).get("name")) for o in rendered}
    policies = [p for p in rest.items(collection_path("NetworkPolicy", namespace)) if meta_of(p).get("name") not in ours]
    limiting = [p for p in [*rendered, *policies] if _policy_selects(p, labels) and _limits_ingress(p)]
    if not limiting:
        return [DoorPath("no ingress policy", "", f"no NetworkPolicy limits who reaches the model pods in {namespace}: "
                                                  "every pod of the cluster can call them")]
    front = front_door(endpoint)
    allowed: list[PodPeer] = [p for p in (front, endpoint.door.kimi_ops, endpoint.door.metrics_scraper) if p is not None]
    cidrs = list(endpoint.door.load_balancer.source_cidrs) if endpoint.door.load_balancer is not None else []
    paths: list[DoorPath] = []
    for policy in limiting:
        wide = wide_peers(list(spec_of(policy).get("ingress") or []), namespace, allowed, cidrs)
        if wide:
            paths.append(DoorPath("NetworkPolicy", str(meta_of(policy).get("name")), "; ".join(wide)))
    return paths


def find_doors(rest: Rest, endpoint: EndpointSettings, objects: list[dict[str, Any]]) -> list[DoorPath]:
    """The door, then every other way to the model pods (see the module docstring)."""
    labels = model_pod_labels(endpoint, objects)
    services = rest.items(collection_path("Service", endpoint.namespace))
    backends = model_backends(rest, endpoint, objects, labels, services)
    return [*_the_door(endpoint), *_public_doors(rest, endpoint, objects), *_service_doors(services, labels),
            *_ingress_doors(rest, endpoint, backends.services), *route_doors(rest, endpoint, backends),
            *_policy_doors(rest, endpoint, objects, labels)]
