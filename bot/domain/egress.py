"""Where HyperPod model pods may connect, the egress rules rendered from it, and the ``pods.boundary`` check.

The guide ("Secure the data plane and tool boundary"): limit model-pod egress to
weight storage, telemetry and the required control-plane endpoints, and never give
the vLLM pod AWS credentials. An endpoint names each destination (:class:`EgressPolicy`):

* weight storage: the addresses of the region's S3 *interface* VPC endpoint (its
  subnets, or its network interfaces as /32s), reached on 443 with private DNS.
  Not the gateway endpoint's prefix list: a NetworkPolicy cannot name a prefix
  list, and its CIDRs are S3's public ranges, shared by every bucket in the region
  and changed by AWS over time, so copying them in is both broad and stale-prone;
* telemetry: the in-cluster collector (its namespace, optionally its pods' labels)
  and/or CIDRs (e.g. the CloudWatch or Prometheus workspace VPC endpoints);
* the control plane: the EKS API server's private endpoint addresses on 443.

DNS goes to kube-dns only. The addresses that hand out AWS credentials (instance
metadata, the EKS Pod Identity agent) are never reachable. :func:`egress_rules`
builds the NetworkPolicy rules; the renderer emits them and :func:`pod_boundary_check`
inspects the very same rules, so the gate checks what is applied.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from bot.domain.checks import Check

CREDENTIAL_ADDRESSES = {
    "169.254.169.254/32": "instance metadata",
    "169.254.170.23/32": "the EKS Pod Identity agent",
    "fd00:ec2::254/128": "instance metadata (IPv6)",
    "fd00:ec2::23/128": "the EKS Pod Identity agent (IPv6)",
}
"""Where a pod could borrow AWS credentials that are not its own."""

WIDEST_PREFIX = {4: 8, 6: 32}
"""A named destination no wider than this: anything broader is not a limit."""

DNS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},  # CoreDNS on EKS keeps kube-dns's label
}
DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
HTTPS = 443


def _cidr(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError:
        raise ValueError(f"{value[:60]!r} is not a CIDR block such as 10.0.0.0/16") from None
    if network.prefixlen < WIDEST_PREFIX[network.version]:
        raise ValueError(f"{value} is wider than /{WIDEST_PREFIX[network.version]}: name the endpoint's own addresses, "
                         "not the internet")
    for address, what in CREDENTIAL_ADDRESSES.items():
        credential = ipaddress.ip_network(address)
        if credential.version == network.version and credential.subnet_of(network):  # type: ignore[arg-type]
            raise ValueError(f"{value} contains {address} ({what}), where a pod could borrow AWS credentials")
    return value


Cidr = Annotated[str, AfterValidator(_cidr)]
LABEL = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"


class TelemetryEgress(BaseModel):
    """Where the pods' telemetry goes: the in-cluster collector and/or CIDRs, on the collector's ports."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
                                  description="Namespace of the in-cluster telemetry collector.")
    pod_labels: dict[Annotated[str, Field(pattern=LABEL)], Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict, description="Labels of the collector's pods in that namespace (none: any pod there).")
    cidrs: list[Cidr] = Field(default_factory=list, description="Telemetry destinations outside the cluster.")
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=lambda: [4317, 4318], min_length=1, description="TCP ports (default OTLP gRPC and HTTP).")

    @model_validator(mode="after")
    def _somewhere(self) -> TelemetryEgress:
        if self.namespace is None and not self.cidrs:
            raise ValueError("telemetry: name the collector's namespace: (and pod_labels:) or its cidrs:")
        if self.pod_labels and self.namespace is None:
            raise ValueError("telemetry: pod_labels: needs the collector's namespace:")
        return self

    def describe(self) -> str:
        where = []
        if self.namespace:
            labels = ",".join(f"{k}={v}" for k, v in sorted(self.pod_labels.items()))
            where.append(f"namespace {self.namespace}" + (f" pods {labels}" if labels else ""))
        where.extend(self.cidrs)
        return f"{' and '.join(where)} on TCP {','.join(str(p) for p in self.ports)}"


class EgressPolicy(BaseModel):
    """An endpoint's named egress destinations (required on a production HyperPod endpoint)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights_cidrs: list[Cidr] = Field(
        min_length=1, description="The weights' S3: the region's S3 interface VPC endpoint addresses (TCP 443).")
    telemetry: TelemetryEgress = Field(description="The telemetry collector (namespace/pod labels) or CIDRs.")
    control_plane_cidrs: list[Cidr] = Field(
        min_length=1, description="The EKS API server's private endpoint addresses (TCP 443).")


REQUIRED = ("egress: weights_cidrs (the S3 interface VPC endpoint's addresses), telemetry (the collector's namespace: "
            "or cidrs:) and control_plane_cidrs (the EKS API endpoint's addresses)")
"""What a production HyperPod endpoint must name; the README's "Egress" shows an example."""


def _ip_blocks(cidrs: list[str]) -> list[dict[str, Any]]:
    return [{"ipBlock": {"cidr": c}} for c in cidrs]


def _tcp(ports: list[int]) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def egress_rules(policy: EgressPolicy | None) -> list[dict[str, Any]]:
    """The NetworkPolicy's ``egress`` rules: DNS, then each named destination on its ports.

    Without a policy (allowed on non-production endpoints only) HTTPS may go anywhere but the credential addresses.
    """
    rules: list[dict[str, Any]] = [{"to": [DNS_PEER], "ports": DNS_PORTS}]
    if policy is None:
        blocks = []
        for whole in ("0.0.0.0/0", "::/0"):
            version = ipaddress.ip_network(whole).version
            kept = [a for a in CREDENTIAL_ADDRESSES if ipaddress.ip_network(a).version == version]
            blocks.append({"ipBlock": {"cidr": whole, "except": kept}})
        return [*rules, {"to": blocks, "ports": _tcp([HTTPS])}]
    telemetry = policy.telemetry
    peers: list[dict[str, Any]] = []
    if telemetry.namespace:
        peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": telemetry.namespace}}}
        if telemetry.pod_labels:
            peer["podSelector"] = {"matchLabels": dict(sorted(telemetry.pod_labels.items()))}
        peers.append(peer)
    return [
        *rules,
        {"to": _ip_blocks(policy.weights_cidrs), "ports": _tcp([HTTPS])},
        {"to": peers + _ip_blocks(telemetry.cidrs), "ports": _tcp(telemetry.ports)},
        {"to": _ip_blocks(policy.control_plane_cidrs), "ports": _tcp([HTTPS])},
    ]


def open_paths(rules: list[dict[str, Any]]) -> list[str]:
    """What in ``rules`` lets a pod out further than named destinations (empty: nothing)."""
    found: list[str] = []
    for index, rule in enumerate(rules, 1):
        if not rule.get("ports"):
            found.append(f"rule {index} allows every port")
        if not rule.get("to"):
            found.append(f"rule {index} allows every destination")
        for peer in rule.get("to") or []:
            block = peer.get("ipBlock")
            if block is not None:
                try:
                    _cidr(block["cidr"])
                except ValueError as exc:
                    found.append(f"rule {index}: {exc}")
            elif peer.get("namespaceSelector", {}).get("matchLabels") in (None, {}):
                found.append(f"rule {index} allows every namespace")
    return found


AWS_CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def pod_boundary_check(env_names: list[str], kind: str, environment: str, policy: EgressPolicy | None) -> Check:
    """The model pods hold no AWS credentials of their own and reach out only to named destinations."""
    name = "pods.boundary"
    carried = sorted(n for n in env_names if n.upper() in AWS_CREDENTIAL_VARIABLES)
    if carried:
        return Check.failed(
            name,
            f"the release gives the model pods AWS credentials ({', '.join(carried)}); the weights are read by the "
            "operator's (HyperPod) or the node's CSI driver's (EKS) identity: remove them",
        )
    if kind == "eks":
        return Check.passed(name, "no AWS credentials in the pods; NetworkPolicy lets out DNS only; no service account token")
    if policy is None:
        unlimited = "the model pods may connect anywhere on HTTPS (but not to instance metadata)"
        if environment == "prod":
            return Check.failed(name, f"{unlimited}: a production endpoint must name {REQUIRED}")
        return Check.warned(name, f"{unlimited}; name {REQUIRED} to limit it (required on prod)")
    opened = open_paths(egress_rules(policy))
    if opened:
        return Check.failed(name, "the egress NetworkPolicy is not limited: " + "; ".join(opened))
    return Check.passed(
        name,
        "no AWS credentials in the pods; NetworkPolicy lets out only DNS (kube-dns), weights S3 "
        f"{', '.join(policy.weights_cidrs)} and control plane {', '.join(policy.control_plane_cidrs)} on TCP 443, "
        f"telemetry {policy.telemetry.describe()}",
    )
