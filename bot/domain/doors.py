"""One door to the model: who may reach the model pods, the ingress rules that say so, and the ``cluster.doors`` check.

The guide: "The OpenAI-compatible endpoint should accept requests only from a
dedicated application layer." kimi-ops's admission (closed, the internal cohort,
a share, open) holds only if the route it writes is the one way users reach
Kimi K3. An endpoint's ``door:`` settings (:class:`DoorSettings`) name who else
may connect to the model pods, and :func:`ingress_rules` turns them into the
``ingress`` of a NetworkPolicy on those pods:

* the Gateway's data plane (the pods that carry the route's traffic, named in
  ``route.gateway.data_plane``), or, on an endpoint without a route, the
  application layer that declares it enforces admission (``door.application_layer``);
* kimi-ops itself (readiness completions, evaluations, sweeps, drains);
* the metrics scraper, on the serving port and the DCGM exporter's port;
* a declared load balancer's subnets (HyperPod's ALB, in front of a declared
  SageMaker endpoint), which a production endpoint may have only under a
  recorded ``side-door`` security exception.

:func:`door_check` judges the paths to the model pods the cluster adapter found
(:class:`DoorPath`: Services of type LoadBalancer or NodePort, Ingresses, other
HTTPRoutes, a SageMaker endpoint, a missing or too-wide ingress policy): on a
production endpoint any path besides the route fails the infrastructure gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bot.domain.checks import Check
from bot.domain.egress import LABEL, Cidr
from bot.domain.governance import SecurityException, allowed_by

SERVING_PORT = 8000
"""The model container's port on both paths (HyperPod ``modelInvocationPort``, the EKS container's ``http``)."""
DCGM_PORT = 9400
"""The NVIDIA DCGM exporter's metrics port."""
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
SIDE_DOOR_EXCEPTION = "side-door"
CHECK = "cluster.doors"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
SAGEMAKER_NAME = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"  # the CRD's pattern for spec.endpointName, without the empty name

Port = Annotated[int, Field(ge=1, le=65535)]
Labels = dict[Annotated[str, Field(pattern=LABEL)], Annotated[str, Field(max_length=63)]]


class PodPeer(BaseModel):
    """Pods of one namespace, by their labels: someone a NetworkPolicy lets in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(pattern=DNS_LABEL, description="The pods' namespace.")
    pod_labels: Labels = Field(min_length=1, description="Labels every one of those pods carries.")
    ports: list[Port] = Field(default_factory=list, description="Model pod ports they may reach (none: the serving port).")

    def peer(self) -> dict[str, Any]:
        """The NetworkPolicy peer: exactly this namespace, exactly these labels."""
        return {"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: self.namespace}},
                "podSelector": {"matchLabels": dict(sorted(self.pod_labels.items()))}}

    def describe(self) -> str:
        labels = ",".join(f"{k}={v}" for k, v in sorted(self.pod_labels.items()))
        return f"pods {labels} in {self.namespace}"


class ApplicationLayer(PodPeer):
    """An application layer in front of an endpoint without a route, which enforces admission itself."""

    acknowledge_seconds: float = Field(
        default=60, gt=0, le=3600,
        description="How long it may take to acknowledge an admission change (write the generation it enforces "
                    "back onto the admission ConfigMap); past it the step fails closed and pages.")


class LoadBalancerDoor(BaseModel):
    """HyperPod's Application Load Balancer in front of the model pods (a side door: prod needs an exception)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    health_check_path: str = Field(default="/health", pattern=r"^/.*", description="The ALB target group's health check.")
    source_cidrs: list[Cidr] = Field(min_length=1, description="The load balancer's subnets, which reach the pods.")


def _default_kimi_ops() -> PodPeer:
    return PodPeer(namespace="kimi-ops", pod_labels={"app.kubernetes.io/name": "kimi-ops"})


def _default_scraper() -> PodPeer:
    return PodPeer(namespace="monitoring", pod_labels={"app.kubernetes.io/name": "prometheus"},
                   ports=[SERVING_PORT, DCGM_PORT])


class DoorSettings(BaseModel):
    """An endpoint's ``door:`` block: who may reach the model pods besides the route's Gateway."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kimi_ops: PodPeer = Field(default_factory=_default_kimi_ops,
                              description="kimi-ops's own pods (readiness, evaluations, sweeps, drains).")
    metrics_scraper: PodPeer = Field(default_factory=_default_scraper,
                                     description="The metrics scraper; its ports include the DCGM exporter's.")
    application_layer: ApplicationLayer | None = Field(
        default=None, description="Without a route: the application layer that enforces admission and acknowledges it.")
    sagemaker_endpoint: str | None = Field(
        default=None, pattern=SAGEMAKER_NAME,
        description="HyperPod: the SageMaker endpoint to create (none by default; prod: a side-door exception).")
    load_balancer: LoadBalancerDoor | None = Field(
        default=None, description="HyperPod: the operator's ALB (none by default; prod: a side-door exception).")

    @model_validator(mode="after")
    def _endpoint_behind_balancer(self) -> DoorSettings:
        if self.sagemaker_endpoint is not None and self.load_balancer is None:
            raise ValueError("door.sagemaker_endpoint reaches the pods through the operator's load balancer: "
                             "declare door.load_balancer (its source_cidrs) too")
        return self


def _tcp(ports: list[int]) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in sorted(set(ports))]


def ingress_rules(door: DoorSettings, front: PodPeer | None) -> list[dict[str, Any]]:
    """The ``ingress`` of the NetworkPolicy on the model pods.

    ``front`` is the Gateway's data plane (an endpoint with a route) or the declared application layer; ``None``
    (allowed off prod only) lets in every pod of the endpoint's namespace, which :func:`door_check` reports.
    """
    first: dict[str, Any] = ({"from": [front.peer()], "ports": _tcp(front.ports or [SERVING_PORT])} if front is not None
                             else {"from": [{"podSelector": {}}], "ports": _tcp([SERVING_PORT])})
    rules = [first]
    for peer in (door.kimi_ops, door.metrics_scraper):
        rules.append({"from": [peer.peer()], "ports": _tcp(peer.ports or [SERVING_PORT])})
    if door.load_balancer is not None:
        rules.append({"from": [{"ipBlock": {"cidr": c}} for c in door.load_balancer.source_cidrs],
                      "ports": _tcp([SERVING_PORT])})
    return rules


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A ``matchLabels`` selector picks an object with ``labels`` (match expressions: taken to pick it, the safe side)."""
    wanted = (selector or {}).get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def _within(peer: dict[str, Any], own_namespace: str, allowed: list[PodPeer], cidrs: list[str]) -> bool:
    """Whether one NetworkPolicy peer admits no one beyond the allowed pods and the declared load balancer."""
    if "ipBlock" in peer:
        return str((peer.get("ipBlock") or {}).get("cidr")) in cidrs
    namespaces = peer.get("namespaceSelector")
    pods = peer.get("podSelector")
    if namespaces is None:
        namespace: str | None = own_namespace
    else:
        labels = namespaces.get("matchLabels") or {}
        namespace = labels.get(NAMESPACE_LABEL) if not namespaces.get("matchExpressions") else None
    if namespace is None or (pods is None and namespaces is not None):
        return False  # every pod of a namespace chosen by labels (or of every namespace)
    chosen = (pods or {}).get("matchLabels") or {}
    if (pods or {}).get("matchExpressions"):
        return False
    return any(p.namespace == namespace and all(chosen.get(k) == v for k, v in p.pod_labels.items()) for p in allowed)


def wide_peers(rules: list[dict[str, Any]], own_namespace: str, allowed: list[PodPeer], cidrs: list[str]) -> list[str]:
    """What in a policy's ``ingress`` rules admits anyone beyond ``allowed`` (empty: nothing)."""
    found: list[str] = []
    for index, rule in enumerate(rules, 1):
        peers = rule.get("from") or []
        if not peers:
            found.append(f"rule {index} admits every source")
        for peer in peers:
            if not _within(peer, own_namespace, allowed, cidrs):
                found.append(f"rule {index} admits {_describe_peer(peer, own_namespace)}")
    return found


def _describe_peer(peer: dict[str, Any], own_namespace: str) -> str:
    if "ipBlock" in peer:
        return f"addresses {(peer.get('ipBlock') or {}).get('cidr')}"
    namespaces = peer.get("namespaceSelector")
    where = own_namespace if namespaces is None else (
        (namespaces.get("matchLabels") or {}).get(NAMESPACE_LABEL) or "every namespace" if not namespaces.get(
            "matchExpressions") else "namespaces chosen by expression")
    labels = ((peer.get("podSelector") or {}).get("matchLabels") or {})
    who = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "every pod"
    return f"{who} in {where}"


@dataclass(frozen=True)
class DoorPath:
    """One way to the model pods: the route, or a side door the cluster (or the endpoint's settings) opens."""

    kind: str  # route, application-layer, LoadBalancer Service, NodePort Service, Ingress, HTTPRoute, SageMaker endpoint, …
    name: str
    detail: str
    declared: bool = False  # opened by the endpoint's own settings (a SageMaker endpoint, a load balancer)
    door: bool = False  # the one intended door (the route, or the declared application layer)

    def describe(self) -> str:
        return f"{self.kind} {self.name}: {self.detail}" if self.name else f"{self.kind}: {self.detail}"


def door_check(paths: list[DoorPath], *, environment: str,
               exception: tuple[SecurityException | None, str | None]) -> Check:
    """``cluster.doors``: on prod the route (or the declared application layer) must be the only way in."""
    doors = [p for p in paths if p.door]
    others = [p for p in paths if not p.door]
    undeclared = [p for p in others if not p.declared]
    prod = environment == "prod"
    door_words = " and ".join(p.describe() for p in doors) or "no route and no application layer keeps users off"
    if not others:
        if not doors:
            return (Check.failed if prod else Check.warned)(CHECK, door_words + ": users are not kept off the candidate")
        return Check.passed(CHECK, f"the only way to the model pods is {door_words}")
    listed = "; ".join(p.describe() for p in others)
    granted, why = exception
    if not prod:
        return Check.warned(CHECK, f"besides {door_words}, the model pods are reached by {listed} "
                                   "(a production endpoint fails on each)")
    if undeclared:
        fix = "; ".join(p.describe() for p in undeclared)
        return Check.failed(CHECK, f"ways to the model pods besides {door_words}: {fix}; close them "
                                   "(kimi-ops's admission does not hold on them)")
    if granted is None:
        return Check.failed(CHECK, f"{listed} reach the model pods besides {door_words}, and a production endpoint needs "
                                   f"a {SIDE_DOOR_EXCEPTION} security exception for them ({why})")
    return Check.passed(CHECK, f"{door_words}; also {listed}, allowed by {allowed_by(granted)}")
