"""The endpoint's pods and nodes for the metrics watch (``WorkloadReader.health``), and a rollout's cold start.

Pods are the endpoint's by name (``<endpoint>`` or ``<endpoint>-…``, as the rollout watch finds them); a
node is read when a pod names it in ``spec.nodeName``, and one the API server no longer has is simply
absent (the rule reads that as node loss). Reads are short; a cluster that cannot be read gives ``None``.
"""

from __future__ import annotations

from typing import Any

from bot.adapters.cluster.rest import Rest, api_error, collection_path, object_path
from bot.adapters.cluster.rollout import belongs_to
from bot.config import EndpointSettings
from bot.domain.coldstart import ColdStart, breakdown
from bot.domain.health import ContainerHealth, NodeHealth, PodHealth, WorkloadHealth
from bot.logs import logger_for

log = logger_for(__name__)
HEALTH_TIMEOUT = (3.0, 10.0)


def _container(status: dict[str, Any]) -> ContainerHealth:
    waiting = ((status.get("state") or {}).get("waiting") or {}).get("reason")
    terminated = ((status.get("lastState") or {}).get("terminated") or {}).get("reason")
    return ContainerHealth(name=str(status.get("name", "?")), restarts=int(status.get("restartCount") or 0),
                           waiting=str(waiting) if waiting else None, last_terminated=str(terminated) if terminated else None,
                           ready=bool(status.get("ready")))


def pod_health(pod: dict[str, Any]) -> PodHealth:
    status = pod.get("status") or {}
    return PodHealth(
        name=str((pod.get("metadata") or {}).get("name", "?")), phase=str(status.get("phase") or "Pending"),
        node=(pod.get("spec") or {}).get("nodeName") or None,
        containers=tuple(_container(c) for c in status.get("containerStatuses") or []),
        reason=status.get("reason") or None,
    )


def node_health(node: dict[str, Any]) -> NodeHealth:
    conditions = {str(c.get("type")): str(c.get("status")) for c in (node.get("status") or {}).get("conditions") or []}
    return NodeHealth(name=str((node.get("metadata") or {}).get("name", "?")), conditions=conditions,
                      unschedulable=bool((node.get("spec") or {}).get("unschedulable")))


def read_health(rest: Rest, endpoint: EndpointSettings) -> WorkloadHealth | None:
    try:
        pods = [pod_health(p) for p in rest.items(collection_path("Pod", endpoint.namespace))
                if belongs_to(str((p.get("metadata") or {}).get("name", "")), endpoint.name)]
        nodes = []
        for name in sorted({p.node for p in pods if p.node}):
            found = rest.get(object_path("Node", name), timeout=HEALTH_TIMEOUT)
            if found is not None:
                nodes.append(node_health(found))
    except Exception as exc:  # the watch must go on to the next endpoint; unknown is not healthy, and is said so
        log.warning("cannot read the pods and nodes of %s: %s", endpoint.name, api_error(exc))
        return None
    return WorkloadHealth(pods=tuple(pods), nodes=tuple(nodes))


def read_cold_start(rest: Rest, endpoint: EndpointSettings, first_completion_s: float | None,
                    container: str = "vllm") -> ColdStart | None:
    """The newest ready pod's cold start (its status and events); None when the cluster cannot be read or has none."""
    try:
        pods = [p for p in rest.items(collection_path("Pod", endpoint.namespace))
                if belongs_to(str((p.get("metadata") or {}).get("name", "")), endpoint.name)]
        if not pods:
            return None
        pod = max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
        name = str((pod.get("metadata") or {}).get("name", ""))
        events = [e for e in rest.items(collection_path("Event", endpoint.namespace))
                  if (e.get("involvedObject") or {}).get("name") == name]
    except Exception as exc:  # a rollout that went live must not fail because its timings cannot be read
        log.warning("cannot read the cold start of %s: %s", endpoint.name, api_error(exc))
        return None
    events.sort(key=lambda e: str(e.get("firstTimestamp") or e.get("eventTime") or ""))
    return breakdown(pod, events, container=container, first_completion_s=first_completion_s)
