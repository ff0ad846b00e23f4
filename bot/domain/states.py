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

``transition`` refuses every move not listed here. Every set of states the
services decide on (terminal, past apply, admission closed, …) is derived here
from the two paths, so a new step changes one tuple, not five call sites. The
database keeps storing :class:`State`'s string values; ``State(row.state)``
reads one back.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    REQUESTED = "requested"
    ARTIFACT_GATE = "artifact_gate"
    INFRASTRUCTURE_GATE = "infrastructure_gate"
    APPLYING = "applying"
    ROLLING_OUT = "rolling_out"
    READINESS = "readiness"
    MODEL_GATE = "model_gate"
    TRAFFIC_GATE = "traffic_gate"
    CLOSE_ADMISSION = "close_admission"
    DRAINING = "draining"
    REOPEN = "reopen"
    LIVE = "live"
    SUPERSEDED = "superseded"
    REJECTED = "rejected"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def words(self) -> str:
        """How a person reads the state: ``rolling out``."""
        return self.value.replace("_", " ")

    @property
    def terminal(self) -> bool:
        """The deployment no longer holds its endpoint (it went live or ended)."""
        return self in TERMINAL

    @property
    def holds_endpoint(self) -> bool:
        """The deployment is in flight: no other deployment may start on its endpoint."""
        return self in IN_FLIGHT

    @property
    def gate(self) -> str | None:
        """The gate this state waits at (``artifact``, ``infrastructure``, ``model``, ``traffic``), if any."""
        return GATE_OF_STATE.get(self)

    @property
    def is_gate(self) -> bool:
        return self in GATE_OF_STATE

    @property
    def past_apply(self) -> bool:
        """The cluster may already carry this deployment's manifest."""
        return self in PAST_APPLY

    @property
    def ended_early(self) -> bool:
        """Failed, cancelled or interrupted: stopped before its path's end, possibly after its manifest was applied."""
        return self in ENDINGS

    @property
    def was_live(self) -> bool:
        """Live now, or live until a later release replaced it."""
        return self in WAS_LIVE


DEPLOY_PATH: tuple[State, ...] = (
    State.REQUESTED, State.ARTIFACT_GATE, State.INFRASTRUCTURE_GATE, State.APPLYING, State.ROLLING_OUT, State.READINESS,
    State.MODEL_GATE, State.TRAFFIC_GATE, State.LIVE,
)
ROLLBACK_PATH: tuple[State, ...] = (
    State.REQUESTED, State.ARTIFACT_GATE, State.CLOSE_ADMISSION, State.DRAINING, State.APPLYING, State.ROLLING_OUT,
    State.READINESS, State.REOPEN, State.LIVE,
)
PATHS: dict[str, tuple[State, ...]] = {"deploy": DEPLOY_PATH, "rollback": ROLLBACK_PATH}

GATE_STATES: dict[State, str] = {
    State.ARTIFACT_GATE: "artifact",
    State.INFRASTRUCTURE_GATE: "infrastructure",
    State.MODEL_GATE: "model",
    State.TRAFFIC_GATE: "traffic",
}
GATE_OF_STATE = GATE_STATES
STATE_OF_GATE: dict[str, State] = {gate: state for state, gate in GATE_STATES.items()}

ENDINGS: frozenset[State] = frozenset({State.FAILED, State.CANCELLED, State.INTERRUPTED})
"""Where any step that is not its path's end may go."""

TERMINAL: frozenset[State] = frozenset(set(State) - set(DEPLOY_PATH[:-1]) - set(ROLLBACK_PATH[:-1]))
"""States in which a deployment no longer holds its endpoint: every state that is not a step before ``live``."""

IN_FLIGHT: frozenset[State] = frozenset(set(State) - TERMINAL)

WAS_LIVE: frozenset[State] = frozenset({State.LIVE, State.SUPERSEDED})


def _from(path: tuple[State, ...], first: State) -> tuple[State, ...]:
    """The steps of ``path`` from ``first`` up to, not including, its end (``live``)."""
    return path[path.index(first):-1]


# States in which the cluster may already carry the new manifest: failing here offers a rollback.
PAST_APPLY: frozenset[State] = frozenset(_from(DEPLOY_PATH, State.APPLYING) + _from(ROLLBACK_PATH, State.APPLYING))

# Steps of a rollback after admission was closed: a failure there leaves it closed until an operator reopens it.
ADMISSION_CLOSED: frozenset[State] = frozenset(_from(ROLLBACK_PATH, State.DRAINING))

# Steps that act on the stored manifest (a rollback's is copied when it is requested; a deploy's is stored before its
# apply): resuming one of them without that manifest cannot know what the cluster runs.
NEEDS_STORED_MANIFEST: dict[str, frozenset[State]] = {
    "deploy": frozenset({State.ROLLING_OUT}),
    "rollback": frozenset(ROLLBACK_PATH[ROLLBACK_PATH.index(State.DRAINING):ROLLBACK_PATH.index(State.ROLLING_OUT) + 1]),
}


def _edges(path: tuple[State, ...]) -> set[tuple[State, State]]:
    edges = {(a, b) for a, b in zip(path, path[1:])}
    for state in path[:-1]:
        edges |= {(state, end) for end in ENDINGS}
    return edges


ALLOWED: frozenset[tuple[State, State]] = frozenset(
    _edges(DEPLOY_PATH)
    | _edges(ROLLBACK_PATH)
    | {(gate_state, State.REJECTED) for gate_state in GATE_STATES}
    | {(State.LIVE, State.SUPERSEDED)}
)


class IllegalTransition(Exception):
    """The state machine does not allow this move."""


def next_state(kind: str, state: str) -> State:
    """The following state on the happy path of a deploy or rollback."""
    path = DEPLOY_PATH if kind == "deploy" else ROLLBACK_PATH
    try:
        return path[path.index(State(state)) + 1]
    except (ValueError, IndexError):
        raise IllegalTransition(f"{kind} has no step after {state}") from None


def check_transition(kind: str, current: str, target: str) -> None:
    path = DEPLOY_PATH if kind == "deploy" else ROLLBACK_PATH
    if (current, target) not in ALLOWED:
        raise IllegalTransition(f"a {kind} cannot go from {current} to {target}")
    if target not in path and target not in ENDINGS | {State.REJECTED, State.SUPERSEDED}:
        raise IllegalTransition(f"{target} is not a step of a {kind}")
    if current not in path and current != State.LIVE:
        raise IllegalTransition(f"{current} is not a step of a {kind}")
