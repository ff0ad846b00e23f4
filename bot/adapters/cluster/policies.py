"""The NetworkPolicies on the model pods: who may reach them (one door) and where they may connect.

* Ingress (both paths): :func:`bot.domain.doors.ingress_rules` — the route's
  Gateway data plane (or the declared application layer of an endpoint without a
  route), kimi-ops itself, the metrics scraper (serving and DCGM ports) and a
  declared load balancer's subnets; nobody else, so closing the route closes
  every way users have to Kimi K3.
* Egress: HyperPod pods reach kube-dns and the endpoint's named destinations
  (:func:`bot.domain.egress.egress_rules`); EKS pods only DNS (the weights come
  through the node's CSI driver).

HyperPod pods are selected by ``app: <InferenceEndpointConfig name>``, the label
the inference operator puts on the pods it creates (with ``deploying-service:
hyperpod-inference``): awslabs/ai-on-sagemaker-hyperpod,
website/docs/00-eks-orchestration/inference/inference-gateway/01-first-gateway.md
("The operator labels its pods app=<metadata.name>"). The operator's sidecars
(reverse proxy, OpenTelemetry collector) share the pod, so the same rules hold
for them. EKS keeps its one policy (ingress and egress) under the endpoint's name.
"""

from __future__ import annotations

from typing import Any

from bot.config import EndpointSettings
from bot.domain.doors import PodPeer, ingress_rules
from bot.domain.egress import DNS_PEER, DNS_PORTS, egress_rules

OPERATOR_POD_LABEL = "app"
"""The label the HyperPod inference operator sets to the InferenceEndpointConfig's name on its pods."""
POLICY_API_VERSION = "networking.k8s.io/v1"


def front_door(endpoint: EndpointSettings) -> PodPeer | None:
    """Who carries users' requests to the model pods: the route's Gateway data plane, else the application layer."""
    if endpoint.route is not None:
        return endpoint.route.gateway.data_plane_for(endpoint.namespace)
    return endpoint.door.application_layer


def model_ingress(endpoint: EndpointSettings) -> list[dict[str, Any]]:
    """The ``ingress`` rules of the model pods' policy (:func:`bot.domain.doors.ingress_rules`)."""
    return ingress_rules(endpoint.door, front_door(endpoint))


def hyperpod_pod_selector(endpoint: EndpointSettings) -> dict[str, str]:
    return {OPERATOR_POD_LABEL: endpoint.name}


def hyperpod_policies(endpoint: EndpointSettings, metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """The egress policy (named destinations only) and the ingress policy (one door), HyperPod's model pods.

    ``metadata`` is the release's metadata for the endpoint object; each policy gets a copy with its own name.
    """
    selector = {"matchLabels": hyperpod_pod_selector(endpoint)}
    return [
        {"apiVersion": POLICY_API_VERSION, "kind": "NetworkPolicy",
         "metadata": {**metadata, "name": f"{endpoint.name}-egress"},
         "spec": {"podSelector": selector, "policyTypes": ["Egress"], "egress": egress_rules(endpoint.egress)}},
        {"apiVersion": POLICY_API_VERSION, "kind": "NetworkPolicy",
         "metadata": {**metadata, "name": f"{endpoint.name}-ingress"},
         "spec": {"podSelector": dict(selector), "policyTypes": ["Ingress"], "ingress": model_ingress(endpoint)}},
    ]


def eks_policy(endpoint: EndpointSettings, metadata: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    """EKS's one policy: the door's ingress, and DNS the only way out."""
    return {
        "apiVersion": POLICY_API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {
            "podSelector": {"matchLabels": dict(selector)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": model_ingress(endpoint),
            # Weights arrive through the node's CSI driver, so the model pod needs no way out but DNS.
            "egress": [{"to": [DNS_PEER], "ports": DNS_PORTS}],
        },
    }
