"""The deployment state machine (pure).

deploy:   requested → artifact_gate → infrastructure_gate → applying → rolling_out
          → readiness → model_gate → traffic_gate → live
rollback: requested → artifact_gate → close_admission → draining → applying
          → rolling_out → readiness → reopen → live
          (its artifact gate re-verifies the weights' checksums and needs
          ``rollback_approvals`` approvals, one by default, zero to auto-approve)
any gate rejected → rejected; any failure → failed (rollback offered);
cancel → cancelled; a crash in a step that cannot be resumed → interrupted;
live → superseded when the next deployment of the endpoint goes live.

``transition`` refuses every move not listed here.
"""

from __future__ import annotations

from typing import Literal

State = Literal[
    "requested",
    "artifact_gate",
    "infrastructure_gate",
    "applying",
    "rolling_out",
    "readiness",
    "model_gate",
    "traffic_gate",
    "close_admission",
    "draining",
    "reopen",
    "live",
    "superseded",
    "rejected",
    "failed",
    "cancelled",
    "interrupted",
]

GATE_STATES: dict[str, str] = {
    "artifact_gate": "artifact",
    "infrastructure_gate": "infrastructure",
    "model_gate": "model",
    "traffic_gate": "traffic",
}
GATE_OF_STATE = GATE_STATES
STATE_OF_GATE = {gate: state for state, gate in GATE_STATES.items()}

TERMINAL: frozenset[str] = frozenset({"live", "superseded", "rejected", "failed", "cancelled", "interrupted"})
"""States in which a deployment no longer holds its endpoint."""

# States in which the cluster may already carry the new manifest: failing here offers a rollback.
PAST_APPLY: frozenset[str] = frozenset({"applying", "rolling_out", "readiness", "model_gate", "traffic_gate", "reopen"})

DEPLOY_PATH: tuple[str, ...] = (
    "requested", "artifact_gate", "infrastructure_gate", "applying", "rolling_out", "readiness", "model_gate", "traffic_gate", "live",
)
ROLLBACK_PATH: tuple[str, ...] = (
    "requested", "artifact_gate", "close_admission", "draining", "applying", "rolling_out", "readiness", "reopen", "live",
)

_ENDINGS = {"failed", "cancelled", "interrupted"}


def _edges(path: tuple[str, ...]) -> set[tuple[str, str]]:
    edges = {(a, b) for a, b in zip(path, path[1:])}
    for state in path[:-1]:
        edges |= {(state, end) for end in _ENDINGS}
    return edges


ALLOWED: frozenset[tuple[str, str]] = frozenset(
    _edges(DEPLOY_PATH)
    | _edges(ROLLBACK_PATH)
    | {(gate_state, "rejected") for gate_state in GATE_STATES}
    | {("live", "superseded")}
)


class IllegalTransition(Exception):
    """The state machine does not allow this move."""


def next_state(kind: str, state: str) -> str:
    """The following state on the happy path of a deploy or rollback."""
    path = DEPLOY_PATH if kind == "deploy" else ROLLBACK_PATH
    try:
        return path[path.index(state) + 1]
    except (ValueError, IndexError):
        raise IllegalTransition(f"{kind} has no step after {state}") from None


def check_transition(kind: str, current: str, target: str) -> None:
    path = DEPLOY_PATH if kind == "deploy" else ROLLBACK_PATH
    if (current, target) not in ALLOWED:
        raise IllegalTransition(f"a {kind} cannot go from {current} to {target}")
    if target not in path and target not in _ENDINGS | {"rejected", "superseded"}:
        raise IllegalTransition(f"{target} is not a step of a {kind}")
    if current not in path and current != "live":
        raise IllegalTransition(f"{current} is not a step of a {kind}")
