"""The ``route`` block of an endpoint's settings: the Gateway API HTTPRoute kimi-ops keeps in front of it.

An operator declares, per endpoint::

    route:
      gateway: {name: public, namespace: gateways, section_name: https}
      hostnames: [kimi.example.com]
      backend: {name: kimi-prod, port: 8000}        # optional: the model Service
      fallback: {name: kimi-fallback, port: 8000}   # optional: the smaller fallback model
      cohort_header: {name: x-kimi-cohort, source: token}   # a per-deployment token in a Secret (or jwt)

Every value is checked with the same patterns and bounds the HTTPRoute CRD
(``gateway.networking.k8s.io/v1``) uses, so a setting that loads always renders
a route the API server accepts. The model backend defaults to the Service the
EKS renderer creates (named after the endpoint, port 8000); on HyperPod the
inference operator makes the Service, so name it here when it differs.
"""

from __future__ import annotations

import re
from typing import Any, Literal

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
INFERENCE_GROUP = "inference.networking.k8s.io"
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


class EndpointPicker(BaseModel):
    """The Endpoint Picker an InferencePool asks which pod takes a request (its Service and port)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL, description="The Endpoint Picker's Service.")
    port: int = Field(default=9002, ge=1, le=65535, description="Its gRPC port (the extension's default 9002).")


HEADER_VALUE = re.compile(r"[!-~]([ -~]*[!-~])?")


def header_value(value: str | None) -> str | None:
    """A value rendered into a route's header match or filter: visible ASCII with inner spaces only (a CR/LF would
    split the header; a value no client can send never matches)."""
    if value is not None and not HEADER_VALUE.fullmatch(value):
        raise ValueError(f"{value[:40]!r} cannot be a header value: visible ASCII, with spaces only inside")
    return value


class Backend(BaseModel):
    """Where a route rule sends requests: a Service and its port, or an InferencePool (Gateway API Inference Extension)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["Service", "InferencePool"] = Field(
        default="Service", description="Service, or InferencePool (group inference.networking.k8s.io): HyperPod's "
                                       "Inference Gateway routes to a pool per model.")
    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL,
                      description="Service or InferencePool name (a DNS label).")
    port: int = Field(default=MODEL_PORT, ge=1, le=65535,
                      description="Service: its port; InferencePool: the model pods' target port.")
    model_name: str | None = Field(
        default=None, min_length=1, max_length=4096,
        description="The model every answer from this backend is labelled with (x-kimi-model); default: the backend's "
                    "name for a fallback, the running release for Kimi K3.")
    render_pool: bool = Field(
        default=True, description="InferencePool: kimi-ops renders it beside the release (false: the Inference "
                                  "Gateway add-on or someone else keeps it).")
    endpoint_picker: EndpointPicker | None = Field(
        default=None, description="InferencePool rendered by kimi-ops: its Endpoint Picker Service.")

    @field_validator("model_name")
    @classmethod
    def _sendable(cls, value: str | None) -> str | None:
        return header_value(value)

    @property
    def group(self) -> str:
        return INFERENCE_GROUP if self.kind == "InferencePool" else ""

    def same(self, other: Backend) -> bool:
        return (self.kind, self.name, self.port) == (other.kind, other.name, other.port)


class RequiresHeader(BaseModel):
    """The request header that says a request needs Kimi K3 itself: never answered by the fallback."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="x-kimi-requires", min_length=1, max_length=256, pattern=HEADER_NAME,
                      description="Header name.")
    value: str = Field(default="kimi-k3", min_length=1, max_length=4096,
                       description="Header value (visible ASCII: a client must be able to send it).")

    @field_validator("value")
    @classmethod
    def _sendable(cls, value: str) -> str:
        return header_value(value) or value


class CohortHeader(BaseModel):
    """The request header that marks the internal cohort, and where its value comes from.

    * ``token`` (default): a random token made anew each time the route closes (each deployment starts by
      closing it), kept only in the Kubernetes Secret ``secret`` (key ``token``) that the application layer reads
      for its internal users; an old or guessed value is an ordinary request.
    * ``jwt``: the gateway verifies the request's JWT and writes a claim into the header itself (HyperPod's
      Inference Gateway ``spec.auth.jwt``, Envoy Gateway's JWT ``SecurityPolicy`` ``claimToHeaders``) after removing
      any copy the client sent; ``value`` is the claim's value that marks the cohort.
    * ``static``: a fixed ``value`` any client can send; refused on a production endpoint.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default=DEFAULT_COHORT_HEADER, min_length=1, max_length=256, pattern=HEADER_NAME,
                      description="Header name.")
    source: Literal["token", "jwt", "static"] = Field(
        default="token", description="token: a per-deployment token in a Secret; jwt: a claim the gateway verifies and "
                                     "writes; static: a fixed value any client can set (not on prod).")
    secret: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN,
                               description="token: the Secret holding it (key `token`); default: <route name>-cohort.")
    claim: str | None = Field(default=None, min_length=1, max_length=256,
                              description="jwt: the claim the gateway copies into the header (said in messages).")
    value: str | None = Field(default=None, min_length=1, max_length=4096,
                              description="jwt: the claim value marking the cohort; static: the header value "
                                          "(default for both: internal).")

    @model_validator(mode="before")
    @classmethod
    def _legacy_static(cls, data: Any) -> Any:
        """A ``value`` without a ``source`` is the old fixed header (loads, and is refused on prod)."""
        if isinstance(data, dict) and "value" in data and "source" not in data:
            return {**data, "source": "static"}
        return data

    @field_validator("value")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and (value != value.strip() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)):
            raise ValueError("the cohort header value must be printable, without leading or trailing spaces")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> CohortHeader:
        if self.source == "token" and self.value is not None:
            raise ValueError("cohort_header.value: a token cohort's value is made per deployment and kept in its "
                             "Secret; remove value (or use source: jwt or static)")
        if self.source != "token" and self.secret is not None:
            raise ValueError("cohort_header.secret is for source: token")
        if self.source != "token" and self.value is None:
            self.value = DEFAULT_COHORT_VALUE
        return self

    def secret_for(self, route_name: str) -> str:
        """The token's Secret: the declared one, else ``<route name>-cohort``."""
        return self.secret or f"{route_name}-cohort"

    def describe(self, route_name: str) -> str:
        """How a request joins the cohort, in words (never the token itself)."""
        if self.source == "token":
            return f"{self.name}: the token in Secret {self.secret_for(route_name)}"
        if self.source == "jwt":
            return f"{self.name}: {self.value}, written by the gateway from the verified JWT claim {self.claim or '(its claim)'}"
        return f"{self.name}: {self.value}"


class RouteSettings(BaseModel):
    """The HTTPRoute kimi-ops writes in front of one endpoint (see DESIGN.md, "Traffic layer")."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=63, pattern=DNS_LABEL,
                             description="Name of the HTTPRoute object; default: the endpoint's name (a pair's: the service's).")
    gateway: GatewayParent = Field(description="The Gateway the route attaches to.")
    hostnames: list[str] = Field(default_factory=list, max_length=16,
                                 description="Host headers the route answers; empty: every hostname of the listener.")
    backend: Backend | None = Field(
        default=None, description="The Kimi K3 model Service; default: named after the endpoint, port 8000.")
    fallback: Backend | None = Field(default=None, description="The smaller fallback model's Service, if any.")
    cohort_header: CohortHeader = Field(default_factory=CohortHeader, description="The header of the internal cohort.")
    requires_header: RequiresHeader = Field(
        default_factory=RequiresHeader, description="The header of requests that need Kimi K3: with a fallback, they "
                                                    "get Kimi K3 or the gateway's unavailable answer, never the fallback.")
    model_header: str = Field(default="x-kimi-model", min_length=1, max_length=256, pattern=HEADER_NAME,
                              description="The response header naming the model that answered (the release or the "
                                          "fallback's name), set by the gateway on every answer.")

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
        if self.backend is not None and self.fallback is not None and self.backend.same(self.fallback):
            raise ValueError("fallback must be another backend than the model backend")
        return self

    def route_name(self, endpoint_name: str) -> str:
        """The HTTPRoute object's name: the declared one (a pair's service), else the endpoint's."""
        return self.name or endpoint_name

    def model_backend(self, endpoint_name: str) -> Backend:
        """The model Service: the declared one, else the one named after the endpoint on port 8000."""
        return self.backend or Backend(name=endpoint_name, port=MODEL_PORT)

    def check_for(self, endpoint_name: str) -> None:
        """Raise ``ValueError`` when the defaulted model backend clashes with the fallback."""
        model = self.model_backend(endpoint_name)
        if self.fallback is not None and model.same(self.fallback):
            raise ValueError(f"route.fallback {self.fallback.name}:{self.fallback.port} is the model Service itself; "
                             "name the smaller fallback model's Service")
