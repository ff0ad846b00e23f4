"""What the cluster runs now, read back from the applied objects and the route (``Cluster.observe``).

Status must not repeat the database's belief, so everything here comes from
the objects as the API server holds them, hand edits included:

* HyperPod: the ``InferenceEndpointConfig`` named after the endpoint. Release
  name and tuple hash from its ``kimi-ops.io/release`` / ``kimi-ops.io/tuple-hash``
  annotations (the label, cut to 63 characters, when the annotation is gone),
  the image from ``spec.worker.image``, the limits from ``spec.worker.requestLimits``.
* EKS: the Deployment named after the endpoint. Release and hash from its pod
  template (what the pods are made of), else from the Deployment's own
  metadata; the image of its ``vllm`` container; the concurrency limit from that
  container's ``--max-num-seqs`` (what vLLM enforces; the last one wins, as in
  argparse), the queue bound and overflow status from the Deployment's limit
  annotations (what the application layer enforces, see :mod:`.render`).
* The route: the admission its rules and weights give (``unknown`` when they fit
  no state), whether its parents accepted the current generation, and its
  one-line summary. An endpoint without a ``route`` block keeps the older
  admission ConfigMap: its ``open`` word when written, nothing otherwise.

Objects that are absent give ``None`` fields: nothing runs. Every read has a
short timeout, and a cluster that cannot be read gives ``None`` (unknown) and a
log line, never an exception: a status reply must not fail because the API
server did not answer, nor pass it off as agreement.
"""

from __future__ import annotations

from typing import Any

from bot.adapters.cluster import eks_limits
from bot.adapters.cluster import render as rendering
from bot.adapters.cluster.rest import Rest, Timeout, api_error, object_path
from bot.adapters.cluster.route import route_path
from bot.adapters.cluster.route_read import read_route_status
from bot.config import EndpointSettings
from bot.domain.admission import RouteStatus
from bot.domain.drift import Observed
from bot.logs import logger_for

log = logger_for(__name__)

# A status reply waits on these reads: fail fast rather than hold the person (connect, read seconds).
OBSERVE_TIMEOUT: Timeout = (3.0, 10.0)
VLLM_CONTAINER = "vllm"
HYPERPOD_LIMIT_KEYS = {
    "maxConcurrentRequests": "max_concurrent_requests",
    "maxQueueSize": "max_queue_size",
    "overflowStatusCode": "overflow_status_code",
}
EKS_LIMIT_ANNOTATIONS = {
    eks_limits.MAX_CONCURRENT_ANNOTATION: "max_concurrent_requests",
    eks_limits.MAX_QUEUE_ANNOTATION: "max_queue_size",
    eks_limits.OVERFLOW_STATUS_ANNOTATION: "overflow_status_code",
}


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: object) -> object:
    """An integer when the text is one; anything else as found, so a hand-typed oddity shows as drift."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        return value


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _release_of(meta: dict[str, Any]) -> tuple[str | None, str | None]:
    annotations = _mapping(meta.get("annotations"))
    labels = _mapping(meta.get("labels"))
    name = annotations.get(rendering.RELEASE_LABEL) or labels.get(rendering.RELEASE_LABEL)
    return _text(name), _text(annotations.get(rendering.HASH_ANNOTATION))


def _workload_name(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind', '?')}/{_mapping(obj.get('metadata')).get('name', '?')}"


def hyperpod_observed(obj: dict[str, Any]) -> dict[str, Any]:
    """Release, hash, image and limits of an ``InferenceEndpointConfig`` (the fields of :class:`Observed`)."""
    worker = _mapping(_mapping(obj.get("spec")).get("worker"))
    release, release_hash = _release_of(_mapping(obj.get("metadata")))
    applied = _mapping(worker.get("requestLimits"))
    limits = {ours: _number(applied[theirs]) for theirs, ours in HYPERPOD_LIMIT_KEYS.items() if theirs in applied}
    return {"release": release, "release_hash": release_hash, "image": _text(worker.get("image")),
            "limits": limits or None, "workload": _workload_name(obj)}


def max_num_seqs(args: list[Any]) -> object:
    """The value of the last ``--max-num-seqs`` in ``args`` (vLLM's argparse keeps the last), or None."""
    found: object = None
    for index, arg in enumerate(args):
        text = str(arg)
        if text == eks_limits.MAX_NUM_SEQS and index + 1 < len(args):
            found = _number(args[index + 1])
        elif text.startswith(eks_limits.MAX_NUM_SEQS + "="):
            found = _number(text.split("=", 1)[1])
    return found


def eks_observed(obj: dict[str, Any]) -> dict[str, Any]:
    """Release, hash, image and limits of the endpoint's Deployment (the fields of :class:`Observed`)."""
    meta = _mapping(obj.get("metadata"))
    template = _mapping(_mapping(obj.get("spec")).get("template"))
    release, release_hash = _release_of(_mapping(template.get("metadata")))
    if release is None and release_hash is None:
        release, release_hash = _release_of(meta)
    containers = [c for c in _mapping(template.get("spec")).get("containers") or [] if isinstance(c, dict)]
    vllm = next((c for c in containers if c.get("name") == VLLM_CONTAINER), containers[0] if containers else {})
    limits: dict[str, Any] = {}
    concurrency = max_num_seqs(list(vllm.get("args") or []))
    if concurrency is not None:
        limits["max_concurrent_requests"] = concurrency
    annotations = _mapping(meta.get("annotations"))
    for annotation, key in EKS_LIMIT_ANNOTATIONS.items():
        # vLLM's own flag is what runs; the annotation only speaks for what vLLM has no flag for.
        if key not in limits and annotation in annotations:
            limits[key] = _number(annotations[annotation])
    return {"release": release, "release_hash": release_hash, "image": _text(vllm.get("image")),
            "limits": limits or None, "workload": _workload_name(obj)}


def route_accepted(status: RouteStatus) -> bool | None:
    """True when every parent accepted this generation and resolved its backends, False when one refused, else None."""
    verdicts = [(p.holds("Accepted", status.generation), p.holds("ResolvedRefs", status.generation))
                for p in status.parents]
    if any(False in verdict for verdict in verdicts):
        return False
    if verdicts and all(verdict == (True, True) for verdict in verdicts):
        return True
    return None


def _route_fields(rest: Rest, endpoint: EndpointSettings, admission_configmap: str) -> dict[str, Any]:
    if endpoint.route is None:
        configmap = rest.get(object_path("ConfigMap", admission_configmap, endpoint.namespace), timeout=OBSERVE_TIMEOUT)
        if configmap is None:
            return {"admission": None}
        word = str(_mapping(configmap.get("data")).get("open", "")).strip().lower()
        return {"admission": {"true": "open", "false": "closed"}.get(word, "unknown")}
    obj = rest.get(route_path(endpoint), timeout=OBSERVE_TIMEOUT)
    if obj is None:
        return {"admission": None}
    status = read_route_status(obj, endpoint)
    return {"admission": str(status.effective) if status.effective is not None else "unknown",
            "route_accepted": route_accepted(status), "route": status.summary}


def manifest_observed(objects: list[dict[str, Any]], endpoint: EndpointSettings) -> Observed:
    """What ``objects`` (a stored manifest) would run, read exactly as :func:`observe` reads the cluster.

    Status sets this record beside the observation, so a difference is the cluster's, never the reader's.
    The route is not part of a release manifest: ``admission`` is None.
    """
    kind = "InferenceEndpointConfig" if endpoint.kind == "hyperpod" else "Deployment"
    workload = next((o for o in objects if o.get("kind") == kind
                     and _mapping(o.get("metadata")).get("name") == endpoint.name), None)
    if workload is None:
        return Observed(release=None, release_hash=None, image=None, limits=None, admission=None)
    fields = hyperpod_observed(workload) if endpoint.kind == "hyperpod" else eks_observed(workload)
    return Observed(**fields, admission=None)


def observe(rest: Rest, endpoint: EndpointSettings, *, admission_configmap: str) -> Observed | None:
    """What runs on ``endpoint`` and what its route admits; None (logged) when the cluster cannot be read."""
    kind = "InferenceEndpointConfig" if endpoint.kind == "hyperpod" else "Deployment"
    try:
        obj = rest.get(object_path(kind, endpoint.name, endpoint.namespace), timeout=OBSERVE_TIMEOUT)
        route = _route_fields(rest, endpoint, admission_configmap)
    except Exception as exc:  # unknown, never agreement and never a traceback in a status reply
        log.warning("could not observe endpoint %s in %s: %s", endpoint.name, endpoint.namespace, api_error(exc))
        return None
    workload: dict[str, Any] = {"release": None, "release_hash": None, "image": None, "limits": None}
    if obj is not None:
        workload = hyperpod_observed(obj) if endpoint.kind == "hyperpod" else eks_observed(obj)
    return Observed(**workload, **route)
