"""The Kubernetes writes an availability drill makes (``DrillActions``), and their undoing.

* delete the endpoint's model pods (its controller — the HyperPod operator's Deployment, or the EKS
  Deployment — must bring one back);
* cordon or uncordon the nodes the pods run on (``spec.unschedulable``, as ``kubectl cordon`` writes it);
* a variant of the live stored manifest for ``model-load-failure`` (the model path replaced by one that does
  not exist), ``artifact-outage`` (the weights read from a bucket that does not exist on HyperPod; on EKS the
  pods mount a weights claim that does not exist, the Mountpoint volume itself being immutable) and
  ``bad-release`` (a wrong ``--served-model-name`` appended: the model loads and answers under another
  name), each annotated ``kimi-ops.io/drill`` so a person reading the cluster sees why.

The cordon uses its own field manager (``kimi-ops-drill``); the variant is applied as a release is (it
replaces the workload's fields), and the stored manifest is re-applied the same way to undo it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from bot.adapters.cluster.observe import VLLM_CONTAINER
from bot.adapters.cluster.rest import Rest, collection_path, object_path
from bot.adapters.cluster.rollout import belongs_to
from bot.config import EndpointSettings
from bot.domain.drills import ARTIFACT_OUTAGE, BAD_RELEASE, MODEL_LOAD_FAILURE
from bot.domain.rollout import RenderedManifest

DRILL_MANAGER = "kimi-ops-drill"
DRILL_ANNOTATION = "kimi-ops.io/drill"
MISSING_MODEL = "drill-missing-weights"  # appended to the model path: a directory no release has
UNREACHABLE = "-drill-unreachable"  # appended to the weights bucket (HyperPod) or claim (EKS): none exists
WORKLOADS = ("InferenceEndpointConfig", "Deployment")


def delete_pods(rest: Rest, endpoint: EndpointSettings) -> list[str]:
    """Delete every pod of the endpoint; the names deleted."""
    names = [str(p["metadata"]["name"]) for p in rest.items(collection_path("Pod", endpoint.namespace))
             if belongs_to(str((p.get("metadata") or {}).get("name", "")), endpoint.name)]
    for name in names:
        rest.delete(object_path("Pod", name, endpoint.namespace))
    return names


def cordon(rest: Rest, nodes: Sequence[str], cordoned: bool) -> None:
    for node in nodes:
        rest.merge_patch(object_path("Node", node), {"spec": {"unschedulable": cordoned or None}}, manager=DRILL_MANAGER)


def vllm_args(obj: dict[str, Any]) -> list[Any] | None:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "InferenceEndpointConfig":
        worker = spec.get("worker") or {}
        args = worker.get("args")
        return args if isinstance(args, list) else None
    containers = (((spec.get("template") or {}).get("spec") or {}).get("containers")) or []
    vllm = next((c for c in containers if c.get("name") == VLLM_CONTAINER), None)
    args = (vllm or {}).get("args")
    return args if isinstance(args, list) else None


def _unreachable_weights(obj: dict[str, Any]) -> None:
    spec = obj.get("spec") or {}
    storage = (spec.get("modelSourceConfig") or {}).get("s3Storage")
    if isinstance(storage, dict) and storage.get("bucketName"):
        storage["bucketName"] = f"{storage['bucketName']}{UNREACHABLE}"
    for volume in ((spec.get("template") or {}).get("spec") or {}).get("volumes") or []:
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, dict) and claim.get("claimName"):
            claim["claimName"] = f"{claim['claimName']}{UNREACHABLE}"


def variant(manifest: RenderedManifest, endpoint: EndpointSettings, kind: str) -> RenderedManifest:
    """The stored manifest made to fail as ``kind`` says, annotated; the other objects unchanged."""
    objects = copy.deepcopy(manifest.objects)
    for obj in objects:
        if obj.get("kind") not in WORKLOADS:
            continue
        obj.setdefault("metadata", {}).setdefault("annotations", {})[DRILL_ANNOTATION] = kind
        if kind == ARTIFACT_OUTAGE:
            _unreachable_weights(obj)
            continue
        args = vllm_args(obj)
        if args is None:
            continue
        if kind == MODEL_LOAD_FAILURE:
            # vLLM's model is its first positional argument (the weights' mount path).
            at = next((i for i, a in enumerate(args) if isinstance(a, str) and not a.startswith("-")), None)
            if at is not None:
                args[at] = f"{str(args[at]).rstrip('/')}/{MISSING_MODEL}"
        elif kind == BAD_RELEASE:
            args += ["--served-model-name", f"{endpoint.served_model_name}-drill-bad-release"]  # the last one wins
    return RenderedManifest.of(objects)
