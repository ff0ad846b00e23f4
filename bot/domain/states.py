"""The deployment state machine (pure): users meet a candidate only after its gates were decided.

deploy (single node):
    requested → artifact_gate → infrastructure_gate
      → closing (the route sends users to the fallback or the gateway's unavailable answer)
      → draining (until nothing runs or waits; past its deadline → drain_stalled, where a person
        chooses to wait longer or to abort, which reopens and cancels)
      → applying → rolling_out → readiness
      → model_gate → traffic_gate   (users still closed out; the bot's own requests reach the model directly)
      → ramping (internal cohort, then each share, each held for a soak while the objectives hold)
      → live
rollback (a person): requested → artifact_gate → closing → draining → applying → rolling_out
    → readiness → evaluation (the model gate's set, recorded as the next baseline) → reopening → live
restore (automatic): the rollback's steps without its gate, started when a deploy ends after apply.

Endings: a gate rejected → rejected; any failure → failed; cancel → cancelled; a gate nobody
decided in time → expired; a crash in a step that cannot be resumed → interrupted. A deploy that
ends while closed but before apply first passes through ``reopening``; one that ends after apply
starts a restore in the same transaction — except on a side of a pair (a service of two endpoints),
where users stayed on the other side: it passes through ``reopening``, which sends all the service's
weight back there, and ends. live → superseded when the next release goes live.

``check_transition`` refuses every move not listed here. Every set of states the services decide
on is derived here from the paths, so a new step changes one tuple, not five call sites. The
database keeps storing :class:`State`'s string values; ``State(row.state)`` reads one back.
"""

from __future__ import annotations

import itertools
from enum import StrEnum


class State(StrEnum):
    REQUESTED = "requested"
    ARTIFACT_GATE = "artifact_gate"
    INFRASTRUCTURE_GATE = "infrastructure_gate"
    CLOSING = "closing"
    DRAINING = "draining"
    DRAIN_STALLED = "drain_stalled"
    APPLYING = "applying"
    ROLLING_OUT = "rolling_out"
    READINESS = "readiness"
    MODEL_GATE = "model_gate"
    TRAFFIC_GATE = "traffic_gate"
    RAMPING = "ramping"
    EVALUATION = "evaluation"
    REOPENING = "reopening"
    LIVE = "live"
    SUPERSEDED = "superseded"
    REJECTED = "rejected"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    INTERRUPTED = "interrupted"

    @property
    def words(self) -> str:
        """How a person reads the state: ``rolling out``."""
        return self.value.replace("_", " ")

    @property
    def during(self) -> str:
        """When something happened, in a sentence: ``at the artifact gate``, ``while rolling out``."""
        gate = GATE_OF_STATE.get(self)
        if gate is not None:
            return f"at the {gate} gate"
        if self is State.REQUESTED:
            return "before its checks started"
        return f"while {self.words}"

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
    State.REQUESTED, State.ARTIFACT_GATE, State.INFRASTRUCTURE_GATE, State.CLOSING, State.DRAINING, State.APPLYING,
    State.ROLLING_OUT, State.READINESS, State.MODEL_GATE, State.TRAFFIC_GATE, State.RAMPING, State.LIVE,
)
ROLLBACK_PATH: tuple[State, ...] = (
    State.REQUESTED, State.ARTIFACT_GATE, State.CLOSING, State.DRAINING, State.APPLYING, State.ROLLING_OUT,
    State.READINESS, State.EVALUATION, State.REOPENING, State.LIVE,
)
RESTORE_PATH: tuple[State, ...] = tuple(s for s in ROLLBACK_PATH if s is not State.ARTIFACT_GATE)
PATHS: dict[str, tuple[State, ...]] = {"deploy": DEPLOY_PATH, "rollback": ROLLBACK_PATH, "restore": RESTORE_PATH}
KINDS: tuple[str, ...] = tuple(PATHS)

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

WAITING: frozenset[State] = frozenset({*GATE_STATES, State.DRAIN_STALLED})
"""States in which the deployment waits for a person (a gate decision, or a stalled drain's choice)."""

_STEPS: frozenset[State] = frozenset(s for path in PATHS.values() for s in path[:-1]) | {State.DRAIN_STALLED}

TERMINAL: frozenset[State] = frozenset(set(State) - _STEPS)
"""States in which a deployment no longer holds its endpoint: every state that is not a step before ``live``."""

IN_FLIGHT: frozenset[State] = frozenset(set(State) - TERMINAL)

WAS_LIVE: frozenset[State] = frozenset({State.LIVE, State.SUPERSEDED})


def _from(path: tuple[State, ...], first: State, last: State = State.LIVE) -> tuple[State, ...]:
    """The steps of ``path`` from ``first`` up to, not including, ``last``."""
    return path[path.index(first):path.index(last)]


PAST_APPLY: frozenset[State] = frozenset(_from(DEPLOY_PATH, State.APPLYING) + _from(ROLLBACK_PATH, State.APPLYING))
"""States in which the cluster may already carry the deployment's manifest: a deploy ending here is restored."""

USERS_CLOSED_OUT: frozenset[State] = frozenset(
    {*_from(DEPLOY_PATH, State.CLOSING, State.RAMPING), State.DRAIN_STALLED, *_from(ROLLBACK_PATH, State.CLOSING)}
)
"""States in which the deployment has closed the route to users (a deploy's ramp opens it step by step)."""

ADMISSION_CLOSED = USERS_CLOSED_OUT

BEFORE_APPLY_CLOSED: frozenset[State] = frozenset({State.CLOSING, State.DRAINING, State.DRAIN_STALLED})
"""A deploy ending here has touched only the route: it reopens (``reopening``) and then ends."""

# Steps that act on the stored manifest (a rollback's is copied when it is requested; a deploy's is stored before its
# apply): resuming one of them without that manifest cannot know what the cluster runs.
NEEDS_STORED_MANIFEST: dict[str, frozenset[State]] = {
    "deploy": frozenset({State.ROLLING_OUT}),
    "rollback": frozenset(_from(ROLLBACK_PATH, State.DRAINING, State.READINESS)),
    "restore": frozenset(_from(RESTORE_PATH, State.DRAINING, State.READINESS)),
}


def _edges(path: tuple[State, ...]) -> set[tuple[State, State]]:
    edges = set(itertools.pairwise(path))
    for state in path[:-1]:
        edges |= {(state, end) for end in ENDINGS}
    return edges


_DRAIN_CHOICES = {(State.DRAINING, State.DRAIN_STALLED), (State.DRAIN_STALLED, State.DRAINING)} | {
    (State.DRAIN_STALLED, end) for end in ENDINGS}
_REOPEN_THEN_END = {(s, State.REOPENING) for s in BEFORE_APPLY_CLOSED} | {
    (State.REOPENING, end) for end in (*ENDINGS, State.EXPIRED)}


# A pair side's deploy ending after its apply: users never left the other side, so it only sends the service's
# weight back there (``reopening``, then its end) instead of restoring a release on its own node.
_PAIR_RETURN = {(s, State.REOPENING) for s in _from(DEPLOY_PATH, State.APPLYING)}


def _rules(kind: str) -> frozenset[tuple[State, State]]:
    path = PATHS[kind]
    gates = {s for s in path if s.is_gate}
    rules = _edges(path) | {(gate, State.REJECTED) for gate in gates} | {(State.LIVE, State.SUPERSEDED)}
    if kind == "deploy":
        rules |= _PAIR_RETURN
    if kind != "restore":  # a person answers a stalled drain and decides gates; a restore waits for nobody
        # Each state that waits for a person can expire; a ramp holds for a step's approval (``ramp.approval_steps``).
        waiting = gates | {State.DRAIN_STALLED} | ({State.RAMPING} & set(path))
        rules |= _DRAIN_CHOICES | _REOPEN_THEN_END | {(state, State.EXPIRED) for state in waiting}
    return frozenset(rules)


RULES: dict[str, frozenset[tuple[State, State]]] = {kind: _rules(kind) for kind in PATHS}
"""Each kind's allowed moves: a deploy's ``reopening`` only ends it, a rollback's leads to ``live``."""

ALLOWED: frozenset[tuple[State, State]] = frozenset().union(*RULES.values())


class IllegalTransition(Exception):
    """The state machine does not allow this move."""


def is_past_apply(kind: str, state: str) -> bool:
    """Whether the cluster may carry this deployment's manifest (a deploy's ``reopening`` comes before its apply)."""
    return State(state) in PAST_APPLY and not (kind == "deploy" and state == State.REOPENING)


def work_kind(stored_kind: str, caused_by: int | None) -> str:
    """The one word for a piece of work, everywhere it is named: ``deploy``, ``rollback`` (a person asked for it) or
    ``restore`` (kimi-ops started it because a deploy ended after its apply; stored as a rollback with its cause)."""
    return "restore" if stored_kind == "rollback" and caused_by is not None else stored_kind


def superseded_reason(by_id: int, by_kind: str, same_release: bool) -> str:
    """Why a live deployment is ``superseded``, naming the work that replaced it by its kind (one word per kind):
    ``superseded by restore #5, which runs the same release again``."""
    return f"superseded by {by_kind} #{by_id}" + (", which runs the same release again" if same_release else "")


def path_of(kind: str) -> tuple[State, ...]:
    try:
        return PATHS[kind]
    except KeyError:
        raise IllegalTransition(f"no deployment kind {kind!r}; kinds are {', '.join(KINDS)}") from None


def next_state(kind: str, state: str) -> State:
    """The following state on the happy path of a deploy, rollback or restore."""
    path = path_of(kind)
    try:
        return path[path.index(State(state)) + 1]
    except (ValueError, IndexError):
        raise IllegalTransition(f"{kind} has no step after {state}") from None


def check_transition(kind: str, current: str, target: str) -> None:
    rules = RULES.get(kind)
    if rules is None:
        path_of(kind)  # raises with the known kinds
        return
    if (State(current), State(target)) not in rules:
        raise IllegalTransition(f"a {kind} cannot go from {current} to {target}")
