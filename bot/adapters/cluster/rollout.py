"""Reading a rollout's state from what the API server shows.

Pure functions over the JSON of the endpoint object, its pods and events: the
watch loop in :mod:`bot.adapters.cluster.kube` polls, these decide.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["pending", "succeeded", "failed"]


@dataclass(frozen=True)
class Reading:
    """One poll's view of the rollout: a state word, the verdict and why."""

    state: str
    verdict: Verdict
    reason: str


def _fresh(obj: dict[str, Any]) -> bool:
    """True when the status describes the current spec (not the previous release's)."""
    generation = (obj.get("metadata") or {}).get("generation")
    status = obj.get("status") or {}
    observed = status.get("observedGeneration")
    if observed is None:
        # Some controllers only stamp their conditions; the newest one tells which spec they saw.
        stamped = [
            int(c["observedGeneration"]) for c in status.get("conditions") or [] if c.get("observedGeneration") is not None
        ]
        observed = max(stamped) if stamped else None
    # A controller that reports no observed generation at all is trusted as is.
    return observed is None or generation is None or int(observed) >= int(generation)


def _failure_reason(status: dict[str, Any]) -> str:
    deployment = status.get("deploymentStatus") or {}
    for candidate in (deployment.get("message"), deployment.get("reason")):
        if candidate:
            return str(candidate)
    for condition in status.get("conditions") or []:
        if str(condition.get("status")) == "False" or condition.get("type") in {"Failed", "DeploymentFailed"}:
            text = condition.get("message") or condition.get("reason")
            if text:
                return str(text)
    return "the operator reported DeploymentFailed without a reason"


def read_hyperpod(obj: dict[str, Any] | None) -> Reading:
    """``status.state`` of an InferenceEndpointConfig."""
    if obj is None:
        return Reading("Absent", "failed", "the InferenceEndpointConfig does not exist; it was deleted or never applied")
    status = obj.get("status") or {}
    state = str(status.get("state") or "DeploymentPending")
    if not _fresh(obj):
        return Reading(state, "pending", f"operator has not yet seen generation {obj['metadata'].get('generation')}")
    if state == "DeploymentComplete":
        return Reading(state, "succeeded", "DeploymentComplete: the operator reports the model deployed")
    if state in {"DeploymentFailed", "DeletionPending", "DeletionInProgress", "DeletionFailed", "DeletionComplete"}:
        reason = _failure_reason(status) if state == "DeploymentFailed" else "the endpoint is being deleted"
        return Reading(state, "failed", f"{state}: {reason}")
    return Reading(state, "pending", state)


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def read_deployment(obj: dict[str, Any] | None) -> Reading:
    """An apps/v1 Deployment's rollout, as ``kubectl rollout status`` judges it."""
    if obj is None:
        return Reading("Absent", "failed", "the Deployment does not exist; it was deleted or never applied")
    status = obj.get("status") or {}
    wanted = int((obj.get("spec") or {}).get("replicas", 1))
    progressing = _condition(status, "Progressing")
    if progressing.get("reason") == "ProgressDeadlineExceeded":
        return Reading(
            "ProgressDeadlineExceeded",
            "failed",
            f"ProgressDeadlineExceeded: {progressing.get('message') or 'the Deployment made no progress in time'}",
        )
    if not _fresh(obj):
        return Reading("Progressing", "pending", "the controller has not yet seen the new spec")
    updated = int(status.get("updatedReplicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    total = int(status.get("replicas") or 0)
    state = f"{available}/{wanted} available"
    if updated >= wanted and available >= wanted and total <= wanted:
        return Reading("Available", "succeeded", f"Deployment available: {available}/{wanted} replicas updated and ready")
    return Reading(state, "pending", f"{updated}/{wanted} updated, {available}/{wanted} available")


def pod_summary(pod: dict[str, Any]) -> str:
    """``name: phase (reason)`` with the most telling container reason, e.g. ImagePullBackOff."""
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    details: list[str] = []
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting = state.get("waiting") or {}
        terminated = state.get("terminated") or {}
        if waiting.get("reason"):
            details.append(str(waiting["reason"]))
        elif terminated.get("reason"):
            details.append(f"{terminated['reason']} (exit {terminated.get('exitCode', '?')})")
        elif container.get("ready"):
            details.append("ready")
    return f"pod {name}: {phase}" + (f" ({', '.join(details)})" if details else "")


def event_key(event: dict[str, Any]) -> str:
    meta = event.get("metadata") or {}
    return f"{meta.get('name', '?')}#{event.get('count', 1)}"


def event_summary(event: dict[str, Any]) -> str:
    involved = event.get("involvedObject") or {}
    return (
        f"{event.get('type', 'Normal')} {event.get('reason', '?')} "
        f"{involved.get('kind', '?')}/{involved.get('name', '?')}: {event.get('message', '')}"
    ).strip()


def happened_before(event: dict[str, Any], since: dt.datetime) -> bool:
    """Whether the event was last seen before ``since`` (an event without a readable time is kept).

    Kubernetes stamps ``lastTimestamp`` to the second (``eventTime`` to the microsecond), so ``since`` is cut
    to its second first: an event of the apply's own first second is never dropped.
    """
    stamp = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
    try:
        seen = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return False
    if seen.tzinfo is None:
        seen = seen.replace(tzinfo=dt.UTC)
    return seen < since.replace(microsecond=0)


def belongs_to(name: str, endpoint_name: str) -> bool:
    """Pods and events of an endpoint are named after it (``<name>`` or ``<name>-…``)."""
    return name == endpoint_name or name.startswith(endpoint_name + "-")
