"""The deployment states: users meet a candidate only after its gates, and every derived set agrees with the table."""

from __future__ import annotations

import pytest

from bot.domain.limits import LIMITS_CLOSED_STATES, proposal_open
from bot.domain.states import (
    ALLOWED,
    DEPLOY_PATH,
    ENDINGS,
    IN_FLIGHT,
    NEEDS_STORED_MANIFEST,
    PAST_APPLY,
    PATHS,
    STATE_OF_GATE,
    TERMINAL,
    USERS_CLOSED_OUT,
    WAITING,
    WAS_LIVE,
    IllegalTransition,
    State,
    check_transition,
    is_past_apply,
    next_state,
)


def _allowed(kind: str, current: str, target: str) -> bool:
    try:
        check_transition(kind, current, target)
    except IllegalTransition:
        return False
    return True


def _reachable(kind: str, start: State, avoid: frozenset[State]) -> set[State]:
    seen, todo = {start}, [start]
    while todo:
        here = todo.pop()
        for target in State:
            if target not in seen and target not in avoid and _allowed(kind, here, target):
                seen.add(target)
                todo.append(target)
    return seen


def test_a_deploy_closes_and_drains_before_it_applies_and_decides_every_gate_before_users_meet_it() -> None:
    order = {s: i for i, s in enumerate(DEPLOY_PATH)}
    assert order[State.CLOSING] < order[State.DRAINING] < order[State.APPLYING]
    assert order[State.APPLYING] < order[State.MODEL_GATE] < order[State.TRAFFIC_GATE] < order[State.RAMPING] < order[State.LIVE]
    # The only way into live is the ramp, and the ramp only follows an approved traffic gate.
    assert {a for a, b in ALLOWED if b == State.LIVE and _allowed("deploy", a, b)} == {State.RAMPING}
    assert {a for a in State if _allowed("deploy", a, State.RAMPING)} == {State.TRAFFIC_GATE}
    # Nothing reaches applying without passing draining.
    assert State.APPLYING not in _reachable("deploy", State.REQUESTED, frozenset({State.DRAINING}))
    # Users are closed out from closing until the ramp opens the route step by step.
    closed = {State.CLOSING, State.DRAINING, State.APPLYING, State.READINESS, State.MODEL_GATE, State.TRAFFIC_GATE}
    assert closed <= USERS_CLOSED_OUT
    assert State.RAMPING not in USERS_CLOSED_OUT


@pytest.mark.parametrize("kind", sorted(PATHS))
def test_every_step_can_fail_be_cancelled_or_interrupted_and_terminal_states_hold_nothing(kind: str) -> None:
    for step in PATHS[kind][:-1]:
        assert all(_allowed(kind, step, end) for end in ENDINGS), step
    assert set(State) - IN_FLIGHT == TERMINAL
    assert {s for s in State if s.terminal} == TERMINAL
    assert {State.LIVE, State.SUPERSEDED, State.REJECTED, State.FAILED, State.CANCELLED, State.EXPIRED,
                        State.INTERRUPTED} == TERMINAL


def test_waiting_states_are_the_gates_and_a_stalled_drain_and_each_may_expire() -> None:
    assert set(STATE_OF_GATE.values()) | {State.DRAIN_STALLED} == WAITING
    assert all(_allowed("deploy", s, State.EXPIRED) for s in WAITING)
    for gate, state in STATE_OF_GATE.items():
        assert state.gate == gate and state.value == f"{gate}_gate" and _allowed("deploy", state, State.REJECTED)
    # A stalled drain goes back to draining (wait longer), or reopens before it ends (abort); it never applies.
    assert not _allowed("deploy", State.DRAIN_STALLED, State.APPLYING)
    assert _allowed("deploy", State.DRAIN_STALLED, State.DRAINING) and _allowed("deploy", State.DRAIN_STALLED, State.REOPENING)


def test_a_restore_has_no_gate_and_rollbacks_evaluate_before_they_reopen() -> None:
    assert next_state("restore", State.REQUESTED) == State.CLOSING
    assert not any(s.is_gate for s in PATHS["restore"])
    assert next_state("rollback", State.READINESS) == State.EVALUATION == next_state("restore", State.READINESS)
    assert next_state("rollback", State.EVALUATION) == State.REOPENING
    assert next_state("deploy", State.READINESS) == State.MODEL_GATE


def test_past_apply_is_from_applying_on_and_a_deploys_reopening_is_before_apply() -> None:
    assert {State.APPLYING, State.ROLLING_OUT, State.READINESS, State.MODEL_GATE, State.TRAFFIC_GATE, State.RAMPING,
                          State.EVALUATION, State.REOPENING} == PAST_APPLY
    assert not is_past_apply("deploy", State.REOPENING) and is_past_apply("restore", State.REOPENING)
    assert not is_past_apply("deploy", State.DRAINING)
    assert NEEDS_STORED_MANIFEST["deploy"] == {State.ROLLING_OUT}
    assert NEEDS_STORED_MANIFEST["restore"] == {State.DRAINING, State.APPLYING, State.ROLLING_OUT}


def test_limits_close_when_the_measured_release_is_not_what_serves() -> None:
    assert {"rejected", "failed", "cancelled", "interrupted", "superseded", "expired"} == LIMITS_CLOSED_STATES
    assert {State.LIVE} | {b for a, b in ALLOWED if a == State.LIVE} == WAS_LIVE
    for state in State:
        assert proposal_open(state) == (state.holds_endpoint or state == State.LIVE)
        assert proposal_open(state.value) == proposal_open(state)


def test_unknown_kinds_and_moves_are_refused_with_a_reason() -> None:
    with pytest.raises(IllegalTransition, match="no deployment kind"):
        check_transition("canary", State.REQUESTED, State.ARTIFACT_GATE)
    with pytest.raises(IllegalTransition, match="cannot go from"):
        check_transition("deploy", State.LIVE, State.REQUESTED)
