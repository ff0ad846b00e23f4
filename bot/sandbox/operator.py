"""A thread that plays the HyperPod inference operator (or the EKS Deployment controller).

It polls the emulator over HTTP with the official client, like a controller
would: for every ``InferenceEndpointConfig`` (or ``Deployment``) whose
``metadata.generation`` it has not handled yet, it walks ``status`` through the
phases, creates the model pod and events, and ends according to ``behaviour``:

* ``succeed`` — DeploymentPending → DeploymentInProgress → DeploymentComplete
  (EKS: the Deployment becomes Available);
* ``fail`` — … → DeploymentFailed with ``failure_reason`` and a CrashLoopBackOff
  pod (EKS: ProgressDeadlineExceeded);
* ``hang`` — stays DeploymentInProgress for ever.

With ``controller=True`` it also plays the controller after a rollout, as availability drills need: a
new generation's pod replaces the older generations' (``Recreate``); a generation annotated
``kimi-ops.io/drill: model-load-failure`` or ``artifact-outage`` fails as vLLM would (its weights are not where it
looks); a deleted pod is brought back, scheduled on a node that is not cordoned and ready
``restart_seconds`` after it was made (on ``clock``, so a test's clock decides); and ``serving(obj, ready)``
is called whenever whether the endpoint has a ready pod changes, so the model server can follow the pods.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
import uuid
from collections.abc import Callable
from typing import Any, Literal

from bot.adapters.clock import Clock, SystemClock
from bot.adapters.cluster.rest import Rest, collection_path, object_path
from bot.adapters.cluster.rollout import belongs_to
from bot.logs import logger_for

log = logger_for(__name__)

Behaviour = Literal["succeed", "fail", "hang"]
DEFAULT_FAILURE = "CUDA out of memory while loading experts: tried to allocate 24.00 GiB"
DRILL_ANNOTATION = "kimi-ops.io/drill"
FAILS_TO_LOAD = {"model-load-failure": "No such file or directory: the model path has no weights",
                 "artifact-outage": "NoSuchBucket: the weights bucket cannot be reached"}


def _ts() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class OperatorSimulator:
    """Start with ``with OperatorSimulator(rest, "model-serving"):``; stops on exit."""

    def __init__(self, rest: Rest, namespace: str, *, kind: Literal["hyperpod", "eks"] = "hyperpod",
                 behaviour: Behaviour = "succeed", step_seconds: float = 0.05, failure_reason: str = DEFAULT_FAILURE,
                 emit_events: bool = True, startup: tuple[float, float, float] = (95.0, 840.0, 380.0),
                 controller: bool = False, restart_seconds: float = 0.0, clock: Clock | None = None,
                 serving: Callable[[dict[str, Any], bool], None] | None = None,
                 changed: threading.Event | None = None, idle_seconds: float = 1.0) -> None:
        self.rest = rest
        self.namespace = namespace
        self.kind = kind
        self.behaviour: Behaviour = behaviour
        self.step_seconds = step_seconds
        self.failure_reason = failure_reason
        self._stop = threading.Event()
        # Set by the emulator on every write (KubeStandIn.changes): with nothing to play, the simulator sleeps
        # until a write or ``idle_seconds`` instead of listing the API every step (most of an idle sandbox's CPU).
        self._changed = changed
        self.idle_seconds = idle_seconds
        self._thread = threading.Thread(target=self._run, name=f"operator-{kind}", daemon=True)
        self._progress: dict[str, tuple[int, int]] = {}  # name -> (generation, step)
        self.errors: list[str] = []
        self.emit_events = emit_events  # False plays a cluster whose events the bot may not read
        # Seconds of image pull, weight transfer and model load a ready pod reports (its status times, its events).
        self.startup = startup
        self.controller = controller
        self.restart_seconds = restart_seconds
        self.clock: Clock = clock or SystemClock()
        self.serving = serving
        self._born: dict[str, dt.datetime] = {}  # pod -> when the controller saw it not ready (clock time)
        self._serving: dict[str, tuple[bool, int]] = {}  # what serving() was last told, per object and generation

    def __enter__(self) -> OperatorSimulator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._changed is not None:
            self._changed.set()
        self._thread.join(10)

    @property
    def _resource(self) -> str:
        return "InferenceEndpointConfig" if self.kind == "hyperpod" else "Deployment"

    def _run(self) -> None:
        playing = True
        while not self._wait(playing):
            try:
                # The controller keeps playing while a pod is still to come back: that happens on a clock a test moves
                # without writing. With every pod ready it waits for a write, as the rollouts do (a deleted pod is one).
                playing = False
                for obj in self.rest.items(collection_path(self._resource, self.namespace)):
                    playing = self._advance(obj) or playing
            except Exception as exc:  # keep playing; the test sees the error list if it matters
                playing = True
                self.errors.append(repr(exc))
                log.debug("operator simulator step failed", exc_info=True)

    def _wait(self, playing: bool) -> bool:
        """Wait one step while a rollout plays, else until a write; True once stopped."""
        if self._changed is None or playing:
            stopped = self._stop.wait(self.step_seconds)
        else:
            self._changed.wait(self.idle_seconds)
            stopped = self._stop.is_set()
        if self._changed is not None:
            self._changed.clear()
        return stopped

    def _advance(self, obj: dict[str, Any]) -> bool:
        """Play one step of ``obj``'s rollout; False when it has nothing left to play."""
        meta = obj["metadata"]
        name, generation = meta["name"], int(meta.get("generation", 1))
        seen_generation, step = self._progress.get(name, (0, 0))
        if generation != seen_generation:
            step = 0
        last = 2 if self.behaviour != "hang" else 1
        if step > last:
            return self.controller and self._reconcile(obj)
        pod = f"{name}-{hashlib.sha256(f'{name}{generation}'.encode()).hexdigest()[:8]}-x7k2q"
        failing = self.controller and self._fails_to_load(obj)
        if failing:
            self.behaviour, saved = "fail", self.behaviour
            self.failure_reason, saved_reason = failing, self.failure_reason
        if self.controller and step >= 2:
            # Told before the new pod shows ready: no look in between may meet a ready pod of the new generation
            # that still answers as the old one did (a drill would take that for a recovery).
            self._tell(obj, not failing and self.behaviour == "succeed")
        try:
            if self.kind == "hyperpod":
                self._hyperpod_step(name, generation, step, pod)
            else:
                self._eks_step(name, generation, step, pod)
        finally:
            if failing:
                self.behaviour, self.failure_reason = saved, saved_reason
        if self.controller and step == 1:
            for old in self._pods_of(name):  # Recreate: the older generations' pods go
                if old["metadata"]["name"] != pod:
                    self.rest.delete(object_path("Pod", old["metadata"]["name"], self.namespace))
            self._tell(obj, False)  # and with them whatever answered: nothing does until the new pod is ready
        self._progress[name] = (generation, step + 1)
        return True

    # -- the controller (``controller=True``) --------------------------------------------------------------

    @staticmethod
    def _fails_to_load(obj: dict[str, Any]) -> str | None:
        drill = ((obj.get("metadata") or {}).get("annotations") or {}).get(DRILL_ANNOTATION)
        return FAILS_TO_LOAD.get(str(drill)) if drill else None

    def _pods_of(self, name: str) -> list[dict[str, Any]]:
        return [p for p in self.rest.items(collection_path("Pod", self.namespace))
                if belongs_to(str((p.get("metadata") or {}).get("name", "")), name)]

    @staticmethod
    def _ready(pod: dict[str, Any]) -> bool:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and all(c.get("ready") for c in statuses)

    def _tell(self, obj: dict[str, Any], ready: bool) -> None:
        name, generation = obj["metadata"]["name"], int(obj["metadata"].get("generation", 1))
        if self.serving is not None and self._serving.get(name) != (ready, generation):
            self._serving[name] = (ready, generation)
            self.serving(obj, ready)

    def _schedulable(self) -> str | None:
        for node in self.rest.items(collection_path("Node")):
            if not (node.get("spec") or {}).get("unschedulable"):
                return str(node["metadata"]["name"])
        return None

    def _reconcile(self, obj: dict[str, Any]) -> bool:
        """After a rollout: bring a deleted pod back, ready ``restart_seconds`` later on a schedulable node; True while
        one is still to come back."""
        name = obj["metadata"]["name"]
        if self._fails_to_load(obj) or self.behaviour != "succeed":
            return False
        pods = self._pods_of(name)
        if any(self._ready(p) for p in pods):
            self._tell(obj, True)
            return False
        self._tell(obj, False)
        now = self.clock.now()
        node = self._schedulable()
        if not pods:
            pod = f"{name}-{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:5]}"
            self._born[pod] = now
            self.rest.create(collection_path("Pod", self.namespace), {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": self.namespace, "labels": {"app": name}},
                "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                               "reason": "Unschedulable"}]},
            })
            return True
        pod = pods[-1]["metadata"]["name"]
        born = self._born.setdefault(pod, now)
        if node is None or (now - born).total_seconds() < self.restart_seconds:
            return True
        if not (pods[-1].get("spec") or {}).get("nodeName"):
            # A real scheduler binds through the pods/binding subresource; the emulator takes the field.
            self.rest.merge_patch(object_path("Pod", pod, self.namespace), {"spec": {"nodeName": node}}, manager="scheduler")
        self._pod(pod, name, "Running", ready=True)
        self._born.pop(pod, None)
        self._tell(obj, True)
        return False

    def _status(self, name: str, status: dict[str, Any]) -> None:
        path = object_path(self._resource, name, self.namespace) + "/status"
        self.rest.merge_patch(path, {"status": status}, manager=f"{self.kind}-operator-simulator")

    def _hyperpod_step(self, name: str, generation: int, step: int, pod: str) -> None:
        if step == 0:
            self._status(name, {"state": "DeploymentPending", "observedGeneration": generation,
                                "deploymentStatus": {"name": name, "deploymentObjectOverallState": "DeploymentPending"}})
            self._event(name, "InferenceEndpointConfig", "Normal", "DeploymentPending", "Creating the model Deployment")
        elif step == 1:
            self._pod(pod, name, "Pending", waiting="ContainerCreating")
            self._event(pod, "Pod", "Normal", "Scheduled", f"Successfully assigned {self.namespace}/{pod} to the p6-b300 node")
            self._status(name, {"state": "DeploymentInProgress", "observedGeneration": generation,
                                "deploymentStatus": {"name": name, "deploymentObjectOverallState": "DeploymentInProgress",
                                                     "lastUpdated": _ts()}})
        elif self.behaviour == "succeed":
            self._pod(pod, name, "Running", ready=True)
            self._event(pod, "Pod", "Normal", "Started", "Started container vllm")
            self._status(name, {"state": "DeploymentComplete", "observedGeneration": generation,
                                "deploymentStatus": {"name": name, "deploymentObjectOverallState": "DeploymentComplete",
                                                     "lastUpdated": _ts()},
                                "endpoints": {"sagemaker": {"state": "CreationCompleted"}}})
        else:
            self._pod(pod, name, "Running", waiting="CrashLoopBackOff")
            self._event(pod, "Pod", "Warning", "BackOff", "Back-off restarting failed container vllm")
            self._status(name, {"state": "DeploymentFailed", "observedGeneration": generation,
                                "deploymentStatus": {"name": name, "deploymentObjectOverallState": "DeploymentFailed",
                                                     "reason": "ModelLoadFailed", "message": self.failure_reason,
                                                     "lastUpdated": _ts()}})

    def _eks_step(self, name: str, generation: int, step: int, pod: str) -> None:
        base = {"observedGeneration": generation, "replicas": 1, "updatedReplicas": 1}
        if step == 0:
            self._status(
                name,
                {
                    **base,
                    "availableReplicas": 0,
                    "unavailableReplicas": 1,
                    "conditions": [
                        {
                            "type": "Progressing",
                            "status": "True",
                            "reason": "NewReplicaSetCreated",
                            "message": "created a new ReplicaSet",
                        }
                    ],
                },
            )
        elif step == 1:
            self._pod(pod, name, "Pending", waiting="ContainerCreating")
            self._event(pod, "Pod", "Normal", "Scheduled", f"Successfully assigned {self.namespace}/{pod}")
        elif self.behaviour == "succeed":
            self._pod(pod, name, "Running", ready=True)
            self._status(
                name,
                {
                    **base,
                    "readyReplicas": 1,
                    "availableReplicas": 1,
                    "unavailableReplicas": 0,
                    "conditions": [
                        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
                    ],
                },
            )
        else:
            self._pod(pod, name, "Running", waiting="CrashLoopBackOff")
            self._event(pod, "Pod", "Warning", "BackOff", "Back-off restarting failed container vllm")
            self._status(
                name,
                {
                    **base,
                    "availableReplicas": 0,
                    "conditions": [
                        {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
                        {
                            "type": "Progressing",
                            "status": "False",
                            "reason": "ProgressDeadlineExceeded",
                            "message": f'ReplicaSet "{name}" has timed out progressing: {self.failure_reason}',
                        },
                    ],
                },
            )

    def _started(self, pod: str) -> dict[str, Any]:
        """What a pod that just became ready reports about its start: pull, weights, load, backdated from now."""
        pull, weights, load = self.startup
        now = dt.datetime.now(dt.UTC)
        started = now - dt.timedelta(seconds=load)
        weights_from = started - dt.timedelta(seconds=weights)

        def stamp(at: dt.datetime) -> str:
            return at.strftime("%Y-%m-%dT%H:%M:%SZ")

        self._event(pod, "Pod", "Normal", "Pulling", 'Pulling image "vllm"')
        minutes, seconds = divmod(pull, 60)
        took = f"{int(minutes)}m{seconds:g}s"  # a Go duration, as the kubelet writes it
        self._event(pod, "Pod", "Normal", "Pulled", f'Successfully pulled image "vllm" in {took} ({took} including waiting)')
        return {
            "initContainerStatuses": [{
                "name": "weights", "ready": True, "restartCount": 0, "image": "s5cmd", "imageID": "",
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": stamp(weights_from),
                                         "finishedAt": stamp(started)}},
            }],
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp(now)}],
            "running_since": stamp(started),
        }

    def _pod(self, pod: str, owner: str, phase: str, *, ready: bool = False, waiting: str | None = None) -> None:
        extra = self._started(pod) if ready else {}
        running_since = extra.pop("running_since", _ts())
        state: dict[str, Any] = {"running": {"startedAt": running_since}} if waiting is None else {"waiting": {"reason": waiting}}
        status = {
            **extra,
            "phase": phase,
            "containerStatuses": [
                {
                    "name": "vllm",
                    "ready": ready,
                    "restartCount": 0 if waiting != "CrashLoopBackOff" else 3,
                    "image": "vllm",
                    "imageID": "",
                    "state": state,
                }
            ],
        }
        path = object_path("Pod", pod, self.namespace)
        if self.rest.get(path) is None:
            self.rest.create(
                collection_path("Pod", self.namespace),
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": pod, "namespace": self.namespace, "labels": self._pod_labels(owner)},
                    "spec": {"containers": [{"name": "vllm", "image": "vllm"}], **self._node()},
                    "status": status,
                },
            )
        else:
            self.rest.merge_patch(path + "/status", {"status": status}, manager="kubelet")

    def _pod_labels(self, owner: str) -> dict[str, str]:
        """The labels the real controller puts on the pods it creates.

        The HyperPod inference operator: ``app=<InferenceEndpointConfig name>`` and
        ``deploying-service=hyperpod-inference`` (awslabs/ai-on-sagemaker-hyperpod,
        website/docs/00-eks-orchestration/inference/inference-gateway/01-first-gateway.md, its
        ``kubectl get pods --show-labels`` output); the egress NetworkPolicy selects them by ``app``.
        """
        if self.kind == "hyperpod":
            return {"app": owner, "deploying-service": "hyperpod-inference"}
        return {"app": owner}

    def _node(self) -> dict[str, str]:
        """The pod's ``nodeName``: the cluster's first node, as the scheduler would bind it on a one-node endpoint."""
        nodes = self.rest.items(collection_path("Node"))
        name = (nodes[0].get("metadata") or {}).get("name") if nodes else None
        return {"nodeName": str(name)} if name else {}

    def _event(self, involved: str, kind: str, type_: str, reason: str, message: str) -> None:
        if not self.emit_events:
            return
        name = f"{involved}.{uuid.uuid4().hex[:12]}"
        self.rest.create(
            collection_path("Event", self.namespace),
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": self.namespace},
                "involvedObject": {"kind": kind, "name": involved, "namespace": self.namespace},
                "type": type_,
                "reason": reason,
                "message": message,
                "count": 1,
                "firstTimestamp": _ts(),
                "lastTimestamp": _ts(),
                "source": {"component": f"{self.kind}-operator"},
            },
        )
