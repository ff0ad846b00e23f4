"""The ``route`` block of an endpoint's settings: the Gateway API HTTPRoute kimi-ops keeps in front of it.

An operator declares, per endpoint::

    route:
      gateway: {name: public, namespace: gateways, section_name: https}
      hostnames: [kimi.example.com]
      backend: {name: kimi-prod, port: 8000}        # optional: the model Service
      fallback: {name: kimi-fallback, port: 8000}   # optional: the smaller fallback model
      cohort_header: {name: x-kimi-cohort, value: internal}

Every value is checked with the same patterns and bounds the HTTPRoute CRD
(``gateway.networking.k8s.io/v1``) uses, so a setting that loads always renders
a route the API server accepts. The model backend defaults to the Service the
EKS renderer creates (named after the endpoint, port 8000); on HyperPod the
inference operator makes the Service, so name it here when it differs.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bot.domain.doors import PodPeer

# The CRD's own patterns (gateway.networking.k8s.io_httproutes.yaml, v1.6.1).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SECTION_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
HOSTNAME = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$"
MODEL_PORT = 8000  # bot.adapters.cluster.render.PORT: the port of the Service the EKS renderer creates
DEFAULT_COHORT_HEADER = "x-kimi-cohort"
DEFAULT_COHORT_VALUE = "internal"
GATEWAY_NAME_LABEL = "gateway.networking.k8s.io/gateway-name"
"""The label Gateway API implementations (Istio, the in-cluster deployment of GEP-1762) put on a Gateway's pods."""


class GatewayParent(BaseModel):
    """The Gateway (and optionally one of its listeners) the route attaches to."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN,
                      description="Name of the Gateway object.")
    namespace: str | None = Field(default=None, min_length=1, max_length=63, pattern=DNS_LABEL,
                                  description="Namespace of the Gateway; default: the endpoint's namespace.")
    section_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=SECTION_NAME,
                                     description="Listener name on the Gateway; default: every listener that allows the route.")
    data_plane: PodPeer | None = Field(
        default=None,
        description="The pods that carry the Gateway's traffic, the only users' way to the model pods (NetworkPolicy); "
                    f"default: pods labelled {GATEWAY_NAME_LABEL}=<name> in the Gateway's namespace.")

    def data_plane_for(self, endpoint_namespace: str) -> PodPeer:
        """The declared data plane, else the Gateway API's label for a Gateway's own pods in its namespace."""
        return self.data_plane or PodPeer(namespace=self.namespace or endpoint_namespace,
                                          pod_labels={GATEWAY_NAME_LABEL: self.name[:63]})


class ServiceBackend(BaseModel):
    """A Kubernetes Service in the endpoint's namespace and its port."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL,
                      description="Service name (a DNS label, as Services require).")
    port: int = Field(default=MODEL_PORT, ge=1, le=65535, description="The Service's port.")


class CohortHeader(BaseModel):
    """The request header that marks the internal cohort (e.g. ``x-kimi-cohort: internal``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default=DEFAULT_COHORT_HEADER, min_length=1, max_length=256, pattern=HEADER_NAME,
                      description="Header name.")
    value: str = Field(default=DEFAULT_COHORT_VALUE, min_length=1, max_length=4096, description="Header value.")

    @field_validator("value")
    @classmethod
    def _printable(cls, value: str) -> str:
        if value != value.strip() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise ValueError("the cohort header value must be printable, without leading or trailing spaces")
        return value


class RouteSettings(BaseModel):
    """The HTTPRoute kimi-ops writes in front of one endpoint (see DESIGN.md, "Traffic layer")."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=63, pattern=DNS_LABEL,
                             description="Name of the HTTPRoute object; default: the endpoint's name (a pair's: the service's).")
    gateway: GatewayParent = Field(description="The Gateway the route attaches to.")
    hostnames: list[str] = Field(default_factory=list, max_length=16,
                                 description="Host headers the route answers; empty: every hostname of the listener.")
    backend: ServiceBackend | None = Field(
        default=None, description="The Kimi K3 model Service; default: named after the endpoint, port 8000.")
    fallback: ServiceBackend | None = Field(default=None, description="The smaller fallback model's Service, if any.")
    cohort_header: CohortHeader = Field(default_factory=CohortHeader, description="The header of the internal cohort.")

    @field_validator("hostnames")
    @classmethod
    def _hostnames(cls, values: list[str]) -> list[str]:
        for host in values:
            if not 1 <= len(host) <= 253 or not re.match(HOSTNAME, host):
                raise ValueError(f"hostname {host!r} is not a lower-case DNS name (optionally *.-prefixed); "
                                 "IP addresses and ports are not allowed")
        if len(set(values)) != len(values):
            raise ValueError("hostnames must not repeat")
        return values

    @model_validator(mode="after")
    def _distinct_backends(self) -> RouteSettings:
        if self.backend is not None and self.fallback is not None and (
                (self.backend.name, self.backend.port) == (self.fallback.name, self.fallback.port)):
            raise ValueError("fallback must be another Service than the model backend")
        return self

    def route_name(self, endpoint_name: str) -> str:
        """The HTTPRoute object's name: the declared one (a pair's service), else the endpoint's."""
        return self.name or endpoint_name

    def model_backend(self, endpoint_name: str) -> ServiceBackend:
        """The model Service: the declared one, else the one named after the endpoint on port 8000."""
        return self.backend or ServiceBackend(name=endpoint_name, port=MODEL_PORT)

    def check_for(self, endpoint_name: str) -> None:
        """Raise ``ValueError`` when the defaulted model backend clashes with the fallback."""
        model = self.model_backend(endpoint_name)
        if self.fallback is not None and (model.name, model.port) == (self.fallback.name, self.fallback.port):
            raise ValueError(f"route.fallback {self.fallback.name}:{self.fallback.port} is the model Service itself; "
                             "name the smaller fallback model's Service")
