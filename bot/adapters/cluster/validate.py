"""Schema validation of rendered Kubernetes objects, before anything is applied.

* ``InferenceEndpointConfig`` objects are checked against the v1
  ``openAPIV3Schema`` of the HyperPod CRD shipped in
  ``bot/data/inferenceendpointconfig-v1.schema.json`` (descriptions stripped).
  The Kubernetes extensions are honoured: ``x-kubernetes-int-or-string`` accepts
  an integer or a string, ``x-kubernetes-list-type: map`` refuses two items
  with the same keys. Unknown fields are refused too, because the API server
  would silently prune them and the endpoint would run without them.
* Every other object goes through the ``kubernetes-validate`` package's strict
  JSON schemas of Kubernetes :data:`KUBERNETES_VERSION`.

Each error reads ``schema path: message``, e.g.
``InferenceEndpointConfig/kimi-prod spec.worker.requestLimits.maxConcurrentRequests: 0 is less than the minimum of 1``.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterable, Iterator
from importlib import resources
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator, validators
from kubernetes_validate import utils as kv
from referencing import Registry, Resource

IEC_API_VERSION = "inference.sagemaker.aws.amazon.com/v1"
IEC_KIND = "InferenceEndpointConfig"
KUBERNETES_VERSION = "1.33"
SCHEMA_FILE = "inferenceendpointconfig-v1.schema.json"
RULE_SCHEMA_FILE = "prometheusrule-v1.schema.json"  # from deploy/crds/ (the Prometheus Operator's CRD)
RULE_API_VERSION = "monitoring.coreos.com/v1"
POOL_SCHEMA_FILE = "inferencepool-v1.schema.json"  # from deploy/crds/ (the Gateway API Inference Extension's CRD)
POOL_API_VERSION = "inference.networking.k8s.io/v1"


@functools.cache
def crd_schema_document() -> dict[str, Any]:
    """The shipped CRD data: group, kind, plural, subresources and ``openAPIV3Schema``."""
    text = resources.files("bot").joinpath("data", SCHEMA_FILE).read_text(encoding="utf-8")
    document: dict[str, Any] = json.loads(text)
    return document


def _structural(node: Any) -> Any:
    """The CRD schema as JSON Schema: int-or-string spelled out, unknown fields refused."""
    if isinstance(node, list):
        return [_structural(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _structural(value) for key, value in node.items()}
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out and "type" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _list_map_keys(validator: Any, list_type: Any, instance: Any, schema: dict[str, Any]) -> Iterator[jsonschema.ValidationError]:
    """``x-kubernetes-list-type: map``: items are identified by their keys, so keys must not repeat."""
    if list_type != "map" or not isinstance(instance, list):
        return
    keys = schema.get("x-kubernetes-list-map-keys", [])
    seen: set[tuple[Any, ...]] = set()
    for item in instance:
        if not isinstance(item, dict):
            continue
        ident = tuple(item.get(k) for k in keys)
        if ident in seen:
            shown = ", ".join(f"{k}={v}" for k, v in zip(keys, ident, strict=True))
            yield jsonschema.ValidationError(f"duplicate entry {shown}")
        seen.add(ident)


_KubeValidator = validators.extend(Draft202012Validator, {"x-kubernetes-list-type": _list_map_keys})


@functools.cache
def rule_schema_document() -> dict[str, Any]:
    """The shipped ``PrometheusRule`` CRD data (``openAPIV3Schema`` of monitoring.coreos.com/v1)."""
    document: dict[str, Any] = json.loads(resources.files("bot").joinpath("data", RULE_SCHEMA_FILE).read_text("utf-8"))
    return document


@functools.cache
def _rule_validator() -> Any:
    return crd_validator(rule_schema_document())


@functools.cache
def pool_schema_document() -> dict[str, Any]:
    """The shipped ``InferencePool`` CRD data (``openAPIV3Schema`` of inference.networking.k8s.io/v1)."""
    document: dict[str, Any] = json.loads(resources.files("bot").joinpath("data", POOL_SCHEMA_FILE).read_text("utf-8"))
    return document


@functools.cache
def _pool_validator() -> Any:
    return crd_validator(pool_schema_document())


@functools.cache
def _iec_validator() -> Any:
    schema = _structural(copy.deepcopy(crd_schema_document()["openAPIV3Schema"]))
    return _KubeValidator(schema)


@functools.cache
def _kubernetes_validator(kind: str, api_version: str) -> Any:
    """A validator for one built-in kind from kubernetes-validate's strict schemas."""
    group_version = api_version.split("/", 1)
    short = f"{group_version[0].split('.', 1)[0]}-{group_version[1]}" if len(group_version) == 2 else api_version
    folder = f"kubernetes-json-schema/v{KUBERNETES_VERSION}.0-local-strict"
    try:
        schema = kv.schema_contents(f"{folder}/{kind.lower()}-{short}.json", KUBERNETES_VERSION)
    except FileNotFoundError:
        return None
    definitions = kv.schema_contents(f"{folder}/_definitions.json", KUBERNETES_VERSION)
    registry: Registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    return Draft202012Validator(schema, registry=registry)


def _path(error: jsonschema.ValidationError) -> str:
    parts: list[str] = []
    for part in error.absolute_path:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts) or "(object)"


def _describe(error: jsonschema.ValidationError) -> str:
    message = error.message
    if len(message) > 200:
        message = message[:197] + "..."
    return f"{_path(error)}: {message}"


def _leaf_errors(errors: Iterable[jsonschema.ValidationError]) -> Iterator[jsonschema.ValidationError]:
    """Descend into anyOf/oneOf failures so the user sees the field that is wrong, not the union."""
    for error in errors:
        if error.context:
            best = jsonschema.exceptions.best_match(error.context)
            yield best if best is not None else error
        else:
            yield error


def crd_validator(document: dict[str, Any]) -> Any:
    """A validator for one shipped CRD document (``openAPIV3Schema`` with the extensions above)."""
    return _KubeValidator(_structural(copy.deepcopy(document["openAPIV3Schema"])))


def schema_errors(validator: Any, obj: dict[str, Any]) -> list[str]:
    """``Kind/name path: message`` for each error ``validator`` finds in ``obj``, ordered by path."""
    label = f"{obj.get('kind') or '?'}/{(obj.get('metadata') or {}).get('name', '?')}"
    errors = sorted(_leaf_errors(validator.iter_errors(obj)), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{label} {_describe(e)}" for e in errors]


def object_errors(obj: dict[str, Any]) -> list[str]:
    """Schema errors of one object (empty when valid), each ``Kind/name path: message``."""
    kind = str(obj.get("kind", ""))
    api_version = str(obj.get("apiVersion", ""))
    name = str((obj.get("metadata") or {}).get("name", "?"))
    label = f"{kind or '?'}/{name}"
    if not kind or not api_version:
        return [f"{label} (object): apiVersion and kind are required"]
    if kind == IEC_KIND:
        if api_version != IEC_API_VERSION:
            return [f"{label} apiVersion: {api_version} is not {IEC_API_VERSION}"]
        validator = _iec_validator()
    elif kind == "InferencePool":
        if api_version != POOL_API_VERSION:
            return [f"{label} apiVersion: {api_version} is not {POOL_API_VERSION}"]
        validator = _pool_validator()
    elif kind == "PrometheusRule":
        if api_version != RULE_API_VERSION:
            return [f"{label} apiVersion: {api_version} is not {RULE_API_VERSION}"]
        validator = _rule_validator()
    else:
        validator = _kubernetes_validator(kind, api_version)
        if validator is None:
            return [f"{label} (object): no Kubernetes {KUBERNETES_VERSION} schema for {api_version} {kind}"]
    errors = sorted(_leaf_errors(validator.iter_errors(obj)), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{label} {_describe(e)}" for e in errors]


def manifest_errors(objects: Iterable[dict[str, Any]]) -> list[str]:
    """All schema errors of all objects, in manifest order."""
    found: list[str] = []
    for obj in objects:
        found.extend(object_errors(obj))
    return found
