"""The deployment states: every predicate and derived set agrees with the transition table."""

from __future__ import annotations

import itertools

import pytest

from bot.domain.limits import LIMITS_CLOSED_STATES, proposal_open
from bot.domain.states import (
    ADMISSION_CLOSED,
    ALLOWED,
    ENDINGS,
    IN_FLIGHT,
    NEEDS_STORED_MANIFEST,
    PAST_APPLY,
    STATE_OF_GATE,
    TERMINAL,
    WAS_LIVE,
    IllegalTransition,
    State,
    check_transition,
    next_state,
)

# The machine as it was written with strings before State existed: the rules must not have moved.
OLD_DEPLOY = ("requested", "artifact_gate", "infrastructure_gate", "applying", "rolling_out", "readiness", "model_gate",
              "traffic_gate", "live")
OLD_ROLLBACK = ("requested", "artifact_gate", "close_admission", "draining", "applying", "rolling_out", "readiness", "reopen",
                "live")
OLD_ENDINGS = {"failed", "cancelled", "interrupted"}
OLD_GATES = {"artifact_gate", "infrastructure_gate", "model_gate", "traffic_gate"}


def _old_edges(path: tuple[str, ...]) -> set[tuple[str, str]]:
    edges = set(itertools.pairwise(path))
    for state in path[:-1]:
        edges |= {(state, end) for end in OLD_ENDINGS}
    return edges


OLD_ALLOWED = _old_edges(OLD_DEPLOY) | _old_edges(OLD_ROLLBACK) | {(g, "rejected") for g in OLD_GATES} | {("live", "superseded")}


def _old_check(kind: str, current: str, target: str) -> bool:
    path = OLD_DEPLOY if kind == "deploy" else OLD_ROLLBACK
    return ((current, target) in OLD_ALLOWED
            and (target in path or target in OLD_ENDINGS | {"rejected", "superseded"})
            and (current in path or current == "live"))


def _allowed(kind: str, current: str, target: str) -> bool:
    try:
        check_transition(kind, current, target)
    except IllegalTransition:
        return False
    return True


def _steps_from(kind: str, start: State) -> set[State]:
    """``start`` and every non-terminal state a ``kind`` can move on to from it."""
    seen, todo = {start}, [start]
    while todo:
        current = todo.pop()
        for target in State:
            if not target.terminal and target not in seen and _allowed(kind, current, target):
                seen.add(target)
                todo.append(target)
    return seen


def test_the_transition_rules_are_those_of_the_string_machine() -> None:
    assert {(str(a), str(b)) for a, b in ALLOWED} == OLD_ALLOWED
    for kind, current, target in itertools.product(("deploy", "rollback"), State, State):
        assert _allowed(kind, current, target) == _old_check(kind, current, target), (kind, current, target)
        # The database hands back plain strings: they are judged the same.
        assert _allowed(kind, current.value, target.value) == _allowed(kind, current, target)
    for kind, path in (("deploy", OLD_DEPLOY), ("rollback", OLD_ROLLBACK)):
        assert [next_state(kind, s) for s in path[:-1]] == list(path[1:])
    with pytest.raises(IllegalTransition):
        next_state("deploy", "no_such_state")


def test_terminal_states_are_those_that_hold_no_endpoint() -> None:
    moves_on = {a for a, b in ALLOWED if b != State.SUPERSEDED}  # live → superseded is not a step of the deployment
    assert moves_on == IN_FLIGHT and set(State) - moves_on == TERMINAL
    assert {"live", "superseded", "rejected", "failed", "cancelled", "interrupted"} == TERMINAL
    for state in State:
        assert state.terminal == (state in TERMINAL) and state.holds_endpoint == (not state.terminal)
        assert State(state.value) is state and state.words == state.value.replace("_", " ")


def test_gate_states_are_the_ones_a_rejection_ends() -> None:
    rejectable = {a for a, b in ALLOWED if b == State.REJECTED}
    assert {s for s in State if s.is_gate} == rejectable == set(STATE_OF_GATE.values())
    for gate, state in STATE_OF_GATE.items():
        assert state.gate == gate and state.value == f"{gate}_gate"
    assert all(s.gate is None for s in State if not s.is_gate)


def test_endings_are_reachable_from_every_step_and_past_apply_from_applying_on() -> None:
    steps = {a for a, _ in ALLOWED} - {State.LIVE}
    assert ENDINGS == {t for t in State if all((s, t) in ALLOWED for s in steps)} == OLD_ENDINGS
    assert {s for s in State if s.ended_early} == ENDINGS
    # Every step reachable from applying without ending (the manifest may be on the cluster from there on).
    seen = _steps_from("deploy", State.APPLYING) | _steps_from("rollback", State.APPLYING)
    assert PAST_APPLY == seen == {"applying", "rolling_out", "readiness", "model_gate", "traffic_gate", "reopen"}
    assert {s for s in State if s.past_apply} == PAST_APPLY


def test_rollback_step_sets() -> None:
    # After close_admission and before live: a failure there leaves admission closed.
    assert ADMISSION_CLOSED == _steps_from("rollback", State.DRAINING) == {
        "draining", "applying", "rolling_out", "readiness", "reopen"}
    old_needs = {(kind, s) for kind in ("deploy", "rollback") for s in State
                 if s == "rolling_out" or (kind == "rollback" and s in {"draining", "applying"})}
    assert {(kind, s) for kind, states in NEEDS_STORED_MANIFEST.items() for s in states} == old_needs


def test_limits_close_when_the_measured_release_is_not_what_serves() -> None:
    assert {"rejected", "failed", "cancelled", "interrupted", "superseded"} == LIMITS_CLOSED_STATES
    assert {State.LIVE} | {b for a, b in ALLOWED if a == State.LIVE} == WAS_LIVE
    for state in State:
        assert proposal_open(state) == (state.holds_endpoint or state == State.LIVE)
        assert proposal_open(state.value) == proposal_open(state)
