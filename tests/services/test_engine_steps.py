"""The engine's steps, one family at a time: the table of steps, moves under the row lock and the lease,
the stop signal of a watch, the gate step, the closed door, and recovery's verdict on a stored state."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from bot.domain.checks import Check, GateReport
from bot.domain.own_requests import OwnRequests
from bot.domain.readiness import MetricsSnapshot
from bot.domain.states import PATHS, TERMINAL, State
from bot.services.deployments import cancel, decide_gate, get_deployment, request_deploy
from bot.services.engine import STEPS
from bot.services.engine.closed_door import StoredLedger, closed_door, requests_sent
from bot.services.engine.recovery import unresumable
from bot.services.engine.run import LeaseLost, Runner, StateMoved, snapshot
from bot.services.releases import register_release
from tests.workflow_support import (
    APPROVER_1,
    REQUESTER,
    ROLES,
    FakeEndpoint,
    endpoint_config,
    fake_ports,
    release_data,
    workflow,
)


@pytest.fixture()
def wf(make_ctx):
    return workflow(make_ctx, releases=2)


def test_every_state_that_needs_a_step_has_one() -> None:
    # Every state a path passes through before `live` is driven by a step; only a stalled drain waits for a person.
    needs_a_step = {state for path in PATHS.values() for state in path[:-1]}
    assert needs_a_step - set(STEPS) == set(), "states with no step: the engine would fail deployments reaching them"
    assert set(STEPS) & (TERMINAL | {State.DRAIN_STALLED}) == set()


def _snap(ctx, deployment_id: int):
    with ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        return snapshot(uow, dep)


def _claim(ctx, deployment_id: int, holder: str) -> None:
    now = dt.datetime.now(dt.UTC)
    with ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        assert uow.leases.claim(dep.endpoint_id, dep.id, holder, now, now + dt.timedelta(seconds=60))
        uow.commit()


def test_a_move_needs_the_lease_and_the_state_it_read(wf) -> None:
    ctx, _ = wf
    view = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER)
    snap = _snap(ctx, view.id)
    runner = Runner(ctx, "replica-b", readiness_pause=0)
    _claim(ctx, view.id, "replica-a")
    with pytest.raises(LeaseLost):
        runner.move(snap, State.ARTIFACT_GATE)
    assert get_deployment(ctx, view.id).state == State.REQUESTED  # another replica drives it: nothing moved

    _claim(ctx, view.id, "replica-a")
    Runner(ctx, "replica-a", readiness_pause=0).move(snap, State.ARTIFACT_GATE)
    with pytest.raises(StateMoved):  # the snapshot is stale now: a second runner never moves it twice
        Runner(ctx, "replica-a", readiness_pause=0).move(snap, State.ARTIFACT_GATE)
    assert get_deployment(ctx, view.id).state == State.ARTIFACT_GATE


def test_a_stop_reaches_the_running_watch_and_a_shutdown_stops_the_next_one_at_once(wf) -> None:
    ctx, _ = wf
    snap = _snap(ctx, request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    runner = Runner(ctx, "replica-a", readiness_pause=0)
    with runner.stoppable(snap) as stop:
        runner.stop(snap.id + 1)
        assert not stop.is_set()
        threading.Timer(0.05, runner.stop, args=(snap.id,)).start()
        assert stop.wait(30)
    runner.stop(snap.id)  # no watch runs any more: nothing to stop, nothing raised
    runner.stop_all()
    with runner.stoppable(snap) as later:
        assert later.is_set() and runner.closing


def test_a_watch_stops_when_its_deployment_moved_elsewhere(wf) -> None:
    ctx, _ = wf
    snap = _snap(ctx, request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    runner = Runner(ctx, "replica-a", readiness_pause=0)
    with runner.stoppable(snap) as stop:
        runner.stop_moved({snap.id: State.REQUESTED.value, snap.id + 1: State.CANCELLED.value})
        assert not stop.is_set()  # still where the watch began; another deployment's move is not its own
        runner.stop_moved({snap.id: State.CANCELLED.value})  # a cancel on another replica, read at a heartbeat
        assert stop.is_set()


def test_the_gate_step_stores_a_report_waits_for_a_person_then_moves_on(wf) -> None:
    ctx, engine = wf
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    assert view.state == State.ARTIFACT_GATE and view.pending is not None
    assert engine.advance(view.id).pending == view.pending  # waiting: advancing again runs no checks twice
    with ctx.uow() as uow:
        assert len(uow.gates.for_deployment(view.id)) == 1
    decide_gate(ctx, view.id, "artifact", "approved", APPROVER_1, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash)
    after = engine.advance(view.id)
    assert after.state == State.INFRASTRUCTURE_GATE and after.pending is not None and after.pending.gate == "infrastructure"


class CountingEndpoint(FakeEndpoint):
    """The candidate's finished-request counter at ``finished``."""

    def __init__(self, finished: float | None) -> None:
        super().__init__()
        self.finished = finished

    def metrics(self, endpoint):
        return MetricsSnapshot(0, 0, 0.1, 0.5, 0.1, 0.3, requests_finished=self.finished)


def _model_report(answered: int, uncertain: int = 0) -> GateReport:
    return GateReport(gate="model", checks=[Check.passed("evaluation", "ok")],
                      attachments={"evaluation": {"own_requests": {"answered": answered, "uncertain": uncertain}}})


@pytest.mark.parametrize(("finished", "status", "words"), [
    (100 + 3 + 9, "pass", "none beyond kimi-ops's own 12 answered"),
    (100 + 3 + 9 + 5, "fail", "5 requests besides kimi-ops's own 12 answered reached the candidate"),
    (None, "warn", "the model's /metrics has no finished-request counter (vllm:request_success_total); whether users "
                   "reached the candidate is unproven"),
])
def test_the_closed_door_counts_kimi_ops_s_own_requests_and_no_one_else(make_ctx, finished, status, words) -> None:
    ctx = make_ctx(endpoints=[endpoint_config()], roles=ROLES, ports=fake_ports(endpoint=CountingEndpoint(finished)))
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    view = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER)
    with ctx.uow() as uow:
        dep = uow.deployments.get_for_update(view.id)
        dep.closed_baseline, dep.own_requests = 100.0, 3  # readiness passed at 100; 3 of kimi-ops's answered since
        uow.commit()
    report, sent = closed_door(Runner(ctx, "replica-a", 0), _snap(ctx, view.id), _model_report(9))
    assert sent == OwnRequests(9, 0)
    [check] = [c for c in report.checks if c.name == "admission.closed"]
    assert check.status == status and words in check.reason


class DarkEndpoint(FakeEndpoint):
    """A candidate whose /metrics does not answer (the port is closed, the sidecar is down)."""

    def metrics(self, endpoint):
        raise ConnectionError("GET /metrics: connection refused")


@pytest.mark.parametrize(("endpoint", "baseline", "words"), [
    (DarkEndpoint(), None, "the model's /metrics cannot be read (GET /metrics: connection refused), and was not when "
                           "its readiness passed; whether users reached the candidate is unproven"),
    (CountingEndpoint(130), None, "the model's /metrics could not be read when its readiness passed, so there is no "
                                  "count to compare with; whether users reached the candidate is unproven"),
    (DarkEndpoint(), 100.0, "the model's /metrics cannot be read (GET /metrics: connection refused); whether users "
                            "reached the candidate is unproven"),
])
def test_the_closed_door_proof_is_shown_unproven_with_why_never_left_out(make_ctx, endpoint, baseline, words) -> None:
    ctx = make_ctx(endpoints=[endpoint_config()], roles=ROLES, ports=fake_ports(endpoint=endpoint))
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    view = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER)
    with ctx.uow() as uow:
        uow.deployments.get_for_update(view.id).closed_baseline = baseline
        uow.commit()
    for gate in ("model", "traffic"):
        report, _ = closed_door(Runner(ctx, "replica-a", 0), _snap(ctx, view.id),
                                _model_report(4).model_copy(update={"gate": gate}))
        [check] = [c for c in report.checks if c.name == "admission.closed"]
        assert (check.status, check.reason) == ("warn", words)


def test_requests_sent_reads_classed_and_older_reports() -> None:
    classed = GateReport(gate="traffic", checks=[], attachments={"sweep": {"own_requests": {"answered": 40, "uncertain": 2}}})
    older = GateReport(gate="model", checks=[], attachments={"evaluation": {"cases": [{}, {}, {}]}})
    assert requests_sent(classed) == OwnRequests(40, 2)
    assert requests_sent(older) == OwnRequests(0, 3)  # none known to be answered
    assert requests_sent(GateReport(gate="artifact", checks=[])) == OwnRequests()


def test_recovery_names_a_rollout_with_no_stored_manifest_and_continues_one_it_can(wf) -> None:
    ctx, _ = wf
    view = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER)
    assert unresumable(ctx, view.id) is None
    with ctx.uow() as uow:  # as a crash between two versions could leave it
        uow.deployments.get_for_update(view.id).state = State.ROLLING_OUT.value
        uow.commit()
    assert "no applied manifest is stored for its rolling out step" in (unresumable(ctx, view.id) or "")
    cancel(ctx, view.id, REQUESTER)
    assert unresumable(ctx, view.id) is None  # ended: nothing to resume


def test_the_ledger_counts_a_request_before_it_is_sent_and_settles_it_after(wf) -> None:
    ctx, _ = wf
    view = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER)

    def row() -> tuple[int, int]:
        with ctx.uow() as uow:
            dep = uow.deployments.get(view.id)
            return dep.own_requests, dep.own_uncertain

    ledger = StoredLedger(ctx, view.id)
    for _ in range(3):
        ledger.sent()
    assert row() == (0, 3)  # on the row before any answer: a process killed now leaves them counted
    ledger.settled("answered")
    ledger.settled("never")  # refused before the engine took it: the counter never sees it
    ledger.settled("uncertain")
    assert row() == (1, 1) and ledger.recorded == OwnRequests(1, 1)
    # The run's report counts what the ledger kept: nothing is added twice when the report is stored.
    report = _model_report(1, 1)
    _, unrecorded = closed_door(Runner(ctx, "replica-a", 0), _snap(ctx, view.id), report, ledger)
    assert unrecorded == OwnRequests()


def test_the_ledger_keeps_every_count_when_a_sweep_counts_from_many_threads_at_once(wf) -> None:
    """Counts arriving while another thread writes go in one later write; none is lost, none is counted twice."""
    ctx, _ = wf
    view = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER)
    ledger = StoredLedger(ctx, view.id)

    def client() -> None:
        for n in range(25):
            ledger.sent()
            ledger.settled("answered" if n % 5 else "never")

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with ctx.uow() as uow:
        dep = uow.deployments.get(view.id)
        assert (dep.own_requests, dep.own_uncertain) == (160, 0)
    assert ledger.recorded == OwnRequests(160, 0)
