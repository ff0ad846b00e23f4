"""Faults a real cluster shows, staged on the Kubernetes emulator: crash-looping and OOM-killed pods, sick nodes.

Each writes what the kubelet or the node controller would write (a pod's ``status``, a node's
``status.conditions``) through the emulator's API, so the metrics watch reads them exactly as it reads a
real cluster. Pods are the endpoint's by name, as the operator simulator creates them.
"""

from __future__ import annotations

from typing import Any

from bot.adapters.cluster.rest import Rest, collection_path, object_path
from bot.adapters.cluster.rollout import belongs_to


def _pods(rest: Rest, namespace: str, endpoint: str) -> list[dict[str, Any]]:
    return [p for p in rest.items(collection_path("Pod", namespace))
            if belongs_to(str((p.get("metadata") or {}).get("name", "")), endpoint)]


def _patch_container(rest: Rest, namespace: str, endpoint: str, change: dict[str, Any], *, phase: str = "Running") -> int:
    pods = _pods(rest, namespace, endpoint)
    for pod in pods:
        name = pod["metadata"]["name"]
        containers = (pod.get("status") or {}).get("containerStatuses") or [{"name": "vllm", "restartCount": 0}]
        statuses = [{**c, **change, "restartCount": int(c.get("restartCount") or 0) + int(change.get("restartCount", 0))}
                    for c in containers]
        rest.merge_patch(object_path("Pod", name, namespace) + "/status",
                         {"status": {"phase": phase, "containerStatuses": statuses}}, manager="kubelet")
    return len(pods)


def crash_loop(rest: Rest, namespace: str, endpoint: str, *, restarts: int = 5, last: str = "Error") -> int:
    """The endpoint's vLLM containers wait in ``CrashLoopBackOff`` after ``restarts`` more exits; pods changed."""
    return _patch_container(rest, namespace, endpoint, {
        "ready": False, "restartCount": restarts, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"reason": last, "exitCode": 137 if last == "OOMKilled" else 1}},
    })


def oom_restart(rest: Rest, namespace: str, endpoint: str) -> int:
    """The containers were OOM-killed once and run again (restart count up by one)."""
    return _patch_container(rest, namespace, endpoint, {
        "ready": True, "restartCount": 1, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
    })


def run_again(rest: Rest, namespace: str, endpoint: str) -> int:
    """The containers run and are ready again; their restart counts stay as they were."""
    return _patch_container(rest, namespace, endpoint, {
        "ready": True, "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
    })


def node_condition(rest: Rest, node: str, condition: str, status: str) -> None:
    """Set one condition of ``node`` (``Ready``/``False``, ``MemoryPressure``/``True``…), keeping the others."""
    found = rest.get(object_path("Node", node)) or {}
    conditions = [c for c in (found.get("status") or {}).get("conditions") or [] if c.get("type") != condition]
    conditions.append({"type": condition, "status": status, "reason": f"KubeletSet{condition}{status}"})
    rest.merge_patch(object_path("Node", node) + "/status", {"status": {"conditions": conditions}},
                     manager="node-controller")


def nodes(rest: Rest) -> list[str]:
    return [str(n["metadata"]["name"]) for n in rest.items(collection_path("Node"))]


def running_pod(rest: Rest, namespace: str, endpoint: str, node: str) -> str:
    """One running, ready vLLM pod of ``endpoint`` bound to ``node`` (what a finished rollout leaves)."""
    name = f"{endpoint}-5d8f7c9b4-x7k2q"
    rest.create(collection_path("Pod", namespace), {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": endpoint}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm"}], "nodeName": node},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "vllm", "ready": True, "restartCount": 0, "image": "vllm", "imageID": "",
             "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]},
    })
    return name
