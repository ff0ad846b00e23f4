"""The infrastructure gate's questions to the cluster before any apply.

CRD and operator (HyperPod), the namespace, and a node of the instance type
with 8 allocatable GPUs that can take the pod (Ready, not cordoned); an API
server that cannot be asked gives an ``error`` check, never a pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.adapters.cluster.rest import Rest, api_error, collection_path, object_path
from bot.adapters.cluster.validate import crd_schema_document
from bot.config import EndpointSettings
from bot.domain.checks import Check

OPERATOR_NAMESPACE = "hyperpod-inference-system"
OPERATOR_DEPLOYMENT = "hyperpod-inference-operator-controller-manager"
GPU_RESOURCE = "nvidia.com/gpu"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
GPUS = 8


def crd_name() -> str:
    doc = crd_schema_document()
    return f"{doc['plural']}.{doc['group']}"


def _gpus(node: dict[str, Any]) -> int:
    raw = ((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, 0)
    try:
        return int(str(raw))
    except ValueError:
        return 0


def _node_state(node: dict[str, Any]) -> str:
    if (node.get("spec") or {}).get("unschedulable"):
        return "is cordoned"
    ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    return "is Ready" if ready is not None and str(ready.get("status")) == "True" else "is not Ready"


def _schedulable(node: dict[str, Any]) -> bool:
    return _node_state(node) == "is Ready"


def _available(deployment: dict[str, Any]) -> bool:
    status = deployment.get("status") or {}
    condition = next((c for c in status.get("conditions") or [] if c.get("type") == "Available"), None)
    if condition is not None:
        return str(condition.get("status")) == "True"
    return int(status.get("availableReplicas") or 0) >= 1


def preflight_checks(rest: Rest, endpoint: EndpointSettings) -> list[Check]:
    """CRD and operator (HyperPod), namespace, a node of the instance type with 8 free GPUs."""
    checks: list[Check] = []
    if endpoint.kind == "hyperpod":
        checks.append(_check("cluster.crd", lambda: _crd_check(rest)))
        checks.append(_check("cluster.operator", lambda: _operator_check(rest)))
    checks.append(_check("cluster.namespace", lambda: _namespace_check(rest, endpoint)))
    checks.append(_check("cluster.gpu_nodes", lambda: _nodes_check(rest, endpoint)))
    return checks


def _check(name: str, run: Callable[[], Check]) -> Check:
    try:
        return run()
    except Exception as exc:  # an unreachable API server is an error, never a pass
        return Check.errored(name, f"could not ask the Kubernetes API: {api_error(exc)}")


def _crd_check(rest: Rest) -> Check:
    name = crd_name()
    crd = rest.get(object_path("CustomResourceDefinition", name))
    if crd is None:
        return Check.failed("cluster.crd", f"CRD {name} is missing; install the HyperPod inference operator add-on")
    versions = {v.get("name") for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served")}
    if "v1" not in versions:
        return Check.failed(
            "cluster.crd",
            f"CRD {name} does not serve v1 (serves {', '.join(sorted(map(str, versions))) or 'nothing'}); "
            "upgrade the operator",
        )
    return Check.passed("cluster.crd", f"CRD {name} serves v1")


def _operator_check(rest: Rest) -> Check:
    deployment = rest.get(object_path("Deployment", OPERATOR_DEPLOYMENT, OPERATOR_NAMESPACE))
    where = f"{OPERATOR_NAMESPACE}/{OPERATOR_DEPLOYMENT}"
    if deployment is None:
        return Check.failed("cluster.operator", f"operator Deployment {where} not found; install the inference operator")
    if not _available(deployment):
        return Check.failed("cluster.operator", f"operator Deployment {where} is not available; check its pods")
    return Check.passed("cluster.operator", f"operator {where} is available")


def _namespace_check(rest: Rest, endpoint: EndpointSettings) -> Check:
    if rest.get(object_path("Namespace", endpoint.namespace)) is None:
        return Check.failed("cluster.namespace", f"namespace {endpoint.namespace} does not exist; create it first")
    return Check.passed("cluster.namespace", f"namespace {endpoint.namespace} exists")


def _nodes_check(rest: Rest, endpoint: EndpointSettings) -> Check:
    bare = endpoint.instance_type.removeprefix("ml.")
    # HyperPod labels its nodes ml.<type>, EKS node groups <type>: either is the instance type.
    wanted = {bare, f"ml.{bare}"}
    selector = f"{INSTANCE_TYPE_LABEL} in ({bare},ml.{bare})"
    nodes = [
        n
        for n in rest.items(collection_path("Node"), label_selector=selector)
        if ((n.get("metadata") or {}).get("labels") or {}).get(INSTANCE_TYPE_LABEL) in wanted
    ]
    with_gpus = [n for n in nodes if _gpus(n) >= GPUS]
    full = [n for n in with_gpus if _schedulable(n)]
    zones = sorted(
        {
            str(((n.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL))
            for n in full
            if ((n.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL)
        }
    )
    if not nodes:
        return Check.failed(
            "cluster.gpu_nodes", f"no node of type {bare} in the cluster; is the reserved capacity attached?", zones=[]
        )
    if not with_gpus:
        counts = ", ".join(f"{n['metadata'].get('name')}={_gpus(n)}" for n in nodes)
        return Check.failed(
            "cluster.gpu_nodes",
            f"no {bare} node reports {GPUS} allocatable {GPU_RESOURCE} ({counts}); check the NVIDIA device plugin",
            zones=[],
        )
    if not full:
        states = ", ".join(f"{n['metadata'].get('name')} {_node_state(n)}" for n in with_gpus)
        return Check.failed(
            "cluster.gpu_nodes",
            f"no {bare} node with {GPUS} GPUs can take the pod ({states}); uncordon it or wait for it to be Ready",
            zones=[],
        )
    names = [str(n["metadata"].get("name")) for n in full]
    return Check.passed(
        "cluster.gpu_nodes",
        f"{len(full)} {bare} node(s) with {GPUS} GPUs in {', '.join(zones) or 'an unlabelled zone'}",
        zones=zones,
        nodes=names,
    )
