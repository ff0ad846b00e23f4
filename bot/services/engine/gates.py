"""The gate steps: run a gate's checks and store the report for a person, or pass a decided gate on.

A deploy's model and traffic reports carry the closed-door proof (:mod:`bot.services.engine.closed_door`).
A rollback configured with ``rollback_approvals = 0`` has its approvable report decided by kimi-ops itself.
A run is stoppable like a rollout watch: a cancel made elsewhere (read at the lease heartbeat), a lost lease or a
shutdown ends its evaluation or sweep at once, and nothing of it is stored but the requests it sent.
"""

from __future__ import annotations

import threading

from bot.domain.checks import GateReport
from bot.domain.states import next_state
from bot.services.access import Identity
from bot.services.engine.closed_door import StoredLedger, add_own, closed_door, ledger_for
from bot.services.engine.run import Runner, Snapshot, StateMoved, StepFailed
from bot.services.errors import Refused
from bot.services.gates import run_gate
from bot.services.transitions import store_gate_report

GIVE_WAY_SECONDS = 0.2
"""How often a step waiting for its gate's run looks whether it was stopped."""


def gate(runner: Runner, snap: Snapshot) -> None:
    """A gate state: run its checks when they have not run; move on once its report is approved."""
    gate_name = snap.state.gate
    assert gate_name is not None
    if not snap.gate_checked:
        check_gate(runner, snap, gate_name)
    elif snap.gate_decision == "approved":
        runner.move(snap, next_state(snap.kind, snap.state))
    else:  # rejected gates end the deployment in decide_gate; nothing to do here
        raise StateMoved("gate decided without a transition")


def run_until_stopped(runner: Runner, snap: Snapshot, gate_name: str, ledger: StoredLedger | None) -> GateReport:
    """Run the gate's checks; a run stopped half-way (the deployment moved on elsewhere) stores nothing: the requests
    it sent are on the deployment's row already (``ledger``), so whoever runs the gate next counts them.

    A run that sends requests runs on a thread of its own, so the step gives way the moment it is stopped, even
    while a request the model never answers holds that thread (until its own timeout); the run sends nothing more.
    """
    with runner.stoppable(snap) as stop:
        if ledger is None:
            report = run_gate(runner.ctx, gate_name, snap.subject, ledger, stop)
        else:
            outcome: list[GateReport | BaseException] = []

            def run() -> None:
                try:
                    outcome.append(run_gate(runner.ctx, gate_name, snap.subject, ledger, stop))
                except BaseException as exc:  # handed back to the step's thread
                    outcome.append(exc)

            worker = threading.Thread(target=run, name=f"kimi-gate-{snap.id}", daemon=True)
            worker.start()
            while worker.is_alive() and not stop.is_set():
                worker.join(GIVE_WAY_SECONDS)
            if not stop.is_set():
                worker.join()
                if isinstance(outcome[0], BaseException):
                    raise outcome[0]
                report = outcome[0]
        if stop.is_set():
            raise StateMoved(f"deployment #{snap.id}: its {gate_name} gate's run stopped (it moved on elsewhere)")
    return report


def check_gate(runner: Runner, snap: Snapshot, gate_name: str) -> None:
    ledger = ledger_for(runner, snap, gate_name)
    report, sent = closed_door(runner, snap, run_until_stopped(runner, snap, gate_name, ledger), ledger)
    with runner.ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        add_own(dep, sent)
        store_gate_report(uow, runner.ctx, dep, report)
        auto = snap.kind == "rollback" and snap.endpoint.rollback_approvals == 0 and report.approvable
        uow.commit()
    if auto:
        auto_decide(runner, snap, gate_name, why="rollback_approvals is 0")


def auto_decide(runner: Runner, snap: Snapshot, gate_name: str, *, why: str) -> None:
    """The system records the decision itself (a rollback configured to need none)."""
    with runner.ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        row = uow.gates.latest(dep.id, gate_name)
        if row is None:
            raise StepFailed(f"no {gate_name} report to record a decision on")
        now = runner.ctx.clock.now()
        row.decision, row.decided_by, row.decided_at = "approved", "kimi-ops", now
        row.seen = {"report_hash": row.report_hash, "release_hash": snap.subject.release_hash, "auto": True}
        uow.audit.record(at=now, actor="kimi-ops", action="gate.approved", subject=f"deployment:{dep.id}",
                         details={"gate": gate_name, "auto": True, "why": why})
        uow.commit()


def recheck_gate(runner: Runner, snap: Snapshot, gate_name: str, actor: Identity) -> None:
    """Run a waiting gate's checks again under the lease the caller holds; the new report is stored beside the old."""
    ledger = ledger_for(runner, snap, gate_name)
    report, sent = closed_door(runner, snap, run_until_stopped(runner, snap, gate_name, ledger), ledger)
    with runner.ctx.uow() as uow:
        dep = runner.locked(uow, snap)
        latest = uow.gates.latest(dep.id, gate_name)
        if latest is not None and latest.decision is not None:
            raise Refused(f"the {gate_name} gate was decided while the checks ran ({latest.decision} by {latest.decided_by})")
        add_own(dep, sent)
        store_gate_report(uow, runner.ctx, dep, report, actor=actor.user_id)
        uow.commit()
