"""Node, GPU and pod health of a live endpoint, and the direct pages they make (pure).

Values come from the NVIDIA DCGM exporter (one reading per GPU) and from the cluster (the endpoint's pods
and the nodes they run on). The rules page on faults, never on load: a GPU at 100 % utilisation, full
memory and high power is a healthy busy GPU.

* ``gpu``: a hardware XID (the exporter's last-XID gauge names a code NVIDIA lists as a hardware or
  driver fault, not an application's), NVLink CRC/replay/recovery errors that grew since the last
  scrape, or fewer GPUs than the node should have (one fell off the bus).
* ``node``: a node running the endpoint's pod is not ``Ready`` or reports memory, disk or PID pressure
  or an unavailable network; or the pod was evicted from a node that is gone.
* ``crashloop``: a container waits in ``CrashLoopBackOff``, or restarted since the last scrape after an
  OOM kill.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# NVIDIA's XID catalogue: codes that mean the hardware, its memory or the driver failed (a GPU reset or a
# node drain), as opposed to 13/31/43/45, which an application's own fault or a killed process raises.
HARDWARE_XIDS: frozenset[int] = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 140})
BAD_NODE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


@dataclass(frozen=True)
class GpuReading:
    gpu: str
    utilisation: float | None = None  # percent
    memory_used_mib: float | None = None
    memory_free_mib: float | None = None
    power_watts: float | None = None
    xid: int | None = None  # the last XID error code the exporter saw (0: none)
    nvlink_errors: float | None = None  # CRC, replay and recovery error counters summed

    @property
    def memory_share(self) -> float | None:
        if self.memory_used_mib is None or self.memory_free_mib is None:
            return None
        total = self.memory_used_mib + self.memory_free_mib
        return self.memory_used_mib / total if total > 0 else None


@dataclass(frozen=True)
class GpuSnapshot:
    gpus: tuple[GpuReading, ...]

    @property
    def utilisation(self) -> float | None:
        values = [g.utilisation for g in self.gpus if g.utilisation is not None]
        return sum(values) / len(values) if values else None

    @property
    def memory_share(self) -> float | None:
        values = [s for g in self.gpus if (s := g.memory_share) is not None]
        return max(values) if values else None

    @property
    def power_watts(self) -> float | None:
        values = [g.power_watts for g in self.gpus if g.power_watts is not None]
        return sum(values) if values else None

    @property
    def nvlink_errors(self) -> dict[str, float]:
        return {g.gpu: g.nvlink_errors for g in self.gpus if g.nvlink_errors is not None}


@dataclass(frozen=True)
class ContainerHealth:
    name: str
    restarts: int
    waiting: str | None = None  # CrashLoopBackOff, ImagePullBackOff, …
    last_terminated: str | None = None  # OOMKilled, Error, …
    ready: bool = True  # the kubelet's readiness of the container (a drill waits for it)


@dataclass(frozen=True)
class PodHealth:
    name: str
    phase: str
    node: str | None
    containers: tuple[ContainerHealth, ...] = ()
    reason: str | None = None  # the pod's own status reason (Evicted, NodeLost)

    @property
    def restarts(self) -> int:
        return sum(c.restarts for c in self.containers)

    @property
    def ready(self) -> bool:
        """Running with every container ready (what serving needs)."""
        return self.phase == "Running" and bool(self.containers) and all(c.ready for c in self.containers)


@dataclass(frozen=True)
class NodeHealth:
    name: str
    conditions: Mapping[str, str] = field(default_factory=dict)  # type → "True"/"False"/"Unknown"
    unschedulable: bool = False


@dataclass(frozen=True)
class WorkloadHealth:
    """The endpoint's pods and the nodes they run on, as the cluster reports them now."""

    pods: tuple[PodHealth, ...]
    nodes: tuple[NodeHealth, ...]

    @property
    def restarts(self) -> dict[str, int]:
        return {p.name: p.restarts for p in self.pods}


# ---------------------------------------------------------------------------- rules


def gpu_faults(now: GpuSnapshot, before: GpuSnapshot | None, expected_gpus: int) -> list[str]:
    """Why the GPUs need a person, one phrase each; empty when they are healthy (however busy)."""
    found: list[str] = []
    if len(now.gpus) < expected_gpus:
        found.append(f"{len(now.gpus)} of {expected_gpus} GPUs report to DCGM (one may have fallen off the bus)")
    for gpu in now.gpus:
        if gpu.xid and gpu.xid in HARDWARE_XIDS:
            found.append(f"GPU {gpu.gpu} raised XID {gpu.xid} (hardware or driver fault)")
    earlier = before.nvlink_errors if before is not None else {}
    for name, errors in sorted(now.nvlink_errors.items()):
        grown = errors - earlier.get(name, errors)
        if grown > 0:
            found.append(f"GPU {name} counted {grown:.0f} new NVLink errors")
    return found


def node_faults(health: WorkloadHealth) -> list[str]:
    found: list[str] = []
    known = {n.name for n in health.nodes}
    for node in health.nodes:
        ready = node.conditions.get("Ready")
        if ready != "True":
            found.append(f"node {node.name} is not Ready ({ready or 'no Ready condition'})")
        found.extend(f"node {node.name} reports {c}" for c in BAD_NODE_CONDITIONS if node.conditions.get(c) == "True")
    for pod in health.pods:
        if pod.reason in ("NodeLost", "Evicted", "NodeShutdown", "Terminated"):
            found.append(f"pod {pod.name} is {pod.reason}")
        elif pod.node and pod.node not in known:
            found.append(f"pod {pod.name} runs on node {pod.node}, which the cluster no longer lists")
    return found


def crash_faults(health: WorkloadHealth, restarts_before: Mapping[str, int] | None) -> list[str]:
    found: list[str] = []
    for pod in health.pods:
        before = (restarts_before or {}).get(pod.name)
        for container in pod.containers:
            if container.waiting == "CrashLoopBackOff":
                last = f", last exit {container.last_terminated}" if container.last_terminated else ""
                found.append(f"container {container.name} of pod {pod.name} is crash-looping "
                             f"({container.restarts} restarts{last})")
            elif container.last_terminated == "OOMKilled" and before is not None and pod.restarts > before:
                found.append(f"container {container.name} of pod {pod.name} was OOM-killed and restarted")
    return found


def summarise_gpus(snapshot: GpuSnapshot | None) -> str:
    if snapshot is None or not snapshot.gpus:
        return "no DCGM reading"
    parts = [f"{len(snapshot.gpus)} GPUs"]
    if (util := snapshot.utilisation) is not None:
        parts.append(f"{util:.0f}% busy")
    if (memory := snapshot.memory_share) is not None:
        parts.append(f"memory {memory:.0%}")
    if (power := snapshot.power_watts) is not None:
        parts.append(f"{power:.0f} W")
    return ", ".join(parts)


def pods_line(pods: Sequence[PodHealth]) -> str:
    return "; ".join(f"{p.name} {p.phase}, {p.restarts} restarts" for p in pods) or "no pods"
