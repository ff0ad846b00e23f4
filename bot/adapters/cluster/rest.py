"""A small JSON-over-REST layer on the official client's ``ApiClient``.

The bot only ever reads and applies a fixed set of kinds, so their REST paths
come from :data:`RESOURCES` instead of API discovery (no discovery round trips,
no cache files, and a missing CRD shows up as a clear 404 in preflight).
Requests go through ``ApiClient.call_api``: the same authentication, TLS and
proxy settings as every other ``kubernetes`` client call, with a request
timeout on each call so nothing hangs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import (
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
)
from urllib3.exceptions import (
    TimeoutError as Urllib3Timeout,
)

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_CONTENT_TYPE = "application/merge-patch+json"
REQUEST_TIMEOUT = (5.0, 30.0)
Timeout = tuple[float, float]


def meta_of(obj: dict[str, Any]) -> dict[str, Any]:
    """An object's ``metadata`` (empty when it has none)."""
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    """An object's ``spec`` (empty when it has none)."""
    spec: dict[str, Any] = obj.get("spec") or {}
    return spec


@dataclass(frozen=True)
class Kind:
    api_version: str
    plural: str
    namespaced: bool


RESOURCES: dict[str, Kind] = {
    "InferenceEndpointConfig": Kind("inference.sagemaker.aws.amazon.com/v1", "inferenceendpointconfigs", True),
    "ServiceAccount": Kind("v1", "serviceaccounts", True),
    "PersistentVolume": Kind("v1", "persistentvolumes", False),
    "PersistentVolumeClaim": Kind("v1", "persistentvolumeclaims", True),
    "Deployment": Kind("apps/v1", "deployments", True),
    "Service": Kind("v1", "services", True),
    "PodDisruptionBudget": Kind("policy/v1", "poddisruptionbudgets", True),
    "NetworkPolicy": Kind("networking.k8s.io/v1", "networkpolicies", True),
    "ConfigMap": Kind("v1", "configmaps", True),
    "Secret": Kind("v1", "secrets", True),
    "HTTPRoute": Kind("gateway.networking.k8s.io/v1", "httproutes", True),
    "GRPCRoute": Kind("gateway.networking.k8s.io/v1", "grpcroutes", True),
    # v1 since Gateway API 1.5 (TLSRoute) and 1.6 (TCPRoute); older installs serve v1alpha2 (route_doors.py reads both).
    "TCPRoute": Kind("gateway.networking.k8s.io/v1", "tcproutes", True),
    "TLSRoute": Kind("gateway.networking.k8s.io/v1", "tlsroutes", True),
    # v1beta1: served by every Gateway API release (v1 only since 1.5); read only (bot/adapters/cluster/route_doors.py).
    "ReferenceGrant": Kind("gateway.networking.k8s.io/v1beta1", "referencegrants", True),
    "PrometheusRule": Kind("monitoring.coreos.com/v1", "prometheusrules", True),
    "Ingress": Kind("networking.k8s.io/v1", "ingresses", True),
    "InferencePool": Kind("inference.networking.k8s.io/v1", "inferencepools", True),
    "Pod": Kind("v1", "pods", True),
    "Event": Kind("v1", "events", True),
    "Namespace": Kind("v1", "namespaces", False),
    "Node": Kind("v1", "nodes", False),
    "CustomResourceDefinition": Kind("apiextensions.k8s.io/v1", "customresourcedefinitions", False),
}


class ApplyConflict(Exception):
    """Server-side apply refused: fields are owned by other field managers."""

    def __init__(self, conflicts: list[str]) -> None:
        self.conflicts = conflicts
        super().__init__("; ".join(conflicts))


def collection_path(kind: str, namespace: str | None = None) -> str:
    info = RESOURCES[kind]
    base = "/api/v1" if info.api_version == "v1" else f"/apis/{info.api_version}"
    if info.namespaced and namespace is not None:
        base += f"/namespaces/{namespace}"
    return f"{base}/{info.plural}"


def object_path(kind: str, name: str, namespace: str | None = None) -> str:
    return f"{collection_path(kind, namespace if RESOURCES[kind].namespaced else None)}/{name}"


def describe_object(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind', '?')}/{meta.get('name', '?')}"


class Rest:
    """GET, LIST and server-side apply of plain JSON objects."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    def _call(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
              body: Any = None, content_type: str | None = None,
              timeout: Timeout = REQUEST_TIMEOUT) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        method, url, headers, body, post = self.api_client.param_serialize(
            method=method, resource_path=path, query_params=query or [], header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(method, url, header_params=headers, body=body, post_params=post,
                                            _request_timeout=timeout)
        data = response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response, body=data.decode("utf-8", "replace") if data else None)
        return json.loads(data) if data else {}

    def get(self, path: str, *, timeout: Timeout = REQUEST_TIMEOUT) -> dict[str, Any] | None:
        """The object at ``path``, or ``None`` when the server answers 404; ``timeout`` is (connect, read) seconds."""
        try:
            return self._call("GET", path, timeout=timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else []
        return list(self._call("GET", path, query=query).get("items") or [])

    def apply(self, obj: dict[str, Any], *, manager: str, force: bool, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply of ``obj`` (created when absent); raises :class:`ApplyConflict` on a 409."""
        kind = str(obj.get("kind"))
        meta = obj.get("metadata") or {}
        path = object_path(kind, meta["name"], meta.get("namespace"))
        query = [("fieldManager", manager), ("force", "true" if force else "false")]
        if dry_run:
            query.append(("dryRun", "All"))
        try:
            # The client serialises a dict body as JSON, which is valid YAML for the apply-patch content type.
            return self._call("PATCH", path, query=query, body=obj, content_type=APPLY_CONTENT_TYPE)
        except ApiException as exc:
            if exc.status == 409:
                raise ApplyConflict(_conflicts(obj, exc)) from None
            raise

    def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", path, body=obj, content_type="application/json")

    def delete(self, path: str) -> dict[str, Any]:
        return self._call("DELETE", path)

    def merge_patch(self, path: str, patch: dict[str, Any], *, manager: str) -> dict[str, Any]:
        return self._call("PATCH", path, query=[("fieldManager", manager)], body=patch, content_type=MERGE_CONTENT_TYPE)


def _conflicts(obj: dict[str, Any], exc: ApiException) -> list[str]:
    """``Kind/name .field: conflict with "manager"`` for each cause the API server lists."""
    label = describe_object(obj)
    try:
        status = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        status = {}
    causes = ((status.get("details") or {}).get("causes")) or []
    found = [f"{label} {c.get('field', '?')}: {c.get('message', 'conflict')}" for c in causes]
    return found or [f"{label}: {status.get('message') or exc.reason or 'conflict'}"]


def api_error(exc: Exception) -> str:
    """One line for an API failure: the server's own message when there is one, else what the connection did.

    Never the client's exception text: an ``ApiException`` prints its response headers, and urllib3 prints its
    connection pool and retry state, neither of which tells a person what is wrong.
    """
    if isinstance(exc, ApiException):
        try:
            body = json.loads(exc.body or "{}")
            message = body.get("message") if isinstance(body, dict) else None
        except (TypeError, ValueError):
            message = None
        return f"HTTP {exc.status}: {message or exc.reason}"
    if isinstance(exc, MaxRetryError):
        pool = exc.pool
        where = f" at {pool.scheme}://{pool.host}:{pool.port}" if pool is not None else ""
        return f"the Kubernetes API{where} is unreachable ({_connection_words(exc.reason)})"
    if isinstance(exc, (ProtocolError, Urllib3Timeout, OSError)):
        return f"the Kubernetes API is unreachable ({_connection_words(exc)})"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _connection_words(reason: BaseException | None) -> str:
    """What a failed connection did, in words (urllib3 nests the socket's error one or two levels down)."""
    seen: BaseException | None = reason
    for _ in range(3):
        if isinstance(seen, ConnectionRefusedError) or (isinstance(seen, NewConnectionError) and "refused" in str(seen)):
            return "connection refused"
        if isinstance(seen, ConnectionResetError):
            return "connection reset"
        if isinstance(seen, (TimeoutError, Urllib3Timeout)):
            return "no answer within the timeout"
        if isinstance(seen, ProtocolError):
            seen = seen.args[1] if len(seen.args) > 1 and isinstance(seen.args[1], BaseException) else None
            if seen is None:
                return "the connection was closed before an answer"
            continue
        if isinstance(seen, NewConnectionError):
            return "could not connect"
        break
    return "the connection failed" if seen is None else f"the connection failed: {type(seen).__name__}"
