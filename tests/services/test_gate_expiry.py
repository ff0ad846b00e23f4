"""Gate expiry: a gate nobody decides reminds its approvers once at half-time and, at expiry, frees or restores the endpoint.

The workflow runs on the in-memory fakes of ``tests/workflow_support.py`` over real SQLite and PostgreSQL; the clock
is a FrozenClock moved by the test, and the job runs through its scheduled entrypoint (``jobs.gate_expiry:run``) with
the process's root installed, as the elected replica runs it.
"""

from __future__ import annotations

import datetime as dt

import pytest

from bot import runtime
from bot.bootstrap import Root
from bot.services.deployments import decide_gate, get_deployment, request_deploy
from bot.services.engine import Engine
from bot.services.releases import register_release
from bot.services.scheduling import JOBS, run_job, runs_of
from jobs import gate_expiry
from tests.workflow_support import ADMIN, APPROVER_1, REQUESTER, ROLES, endpoint_config, fake_ports, release_data

GROUP = "S0KIMIAPPROVE"
BEFORE = dt.timedelta(hours=24)  # gate_wait_before_apply_minutes' default
AFTER = dt.timedelta(minutes=30)  # gate_wait_after_apply_minutes' default


def setup(make_ctx):
    ctx = make_ctx(endpoints=[endpoint_config(approver_group=GROUP)], roles=ROLES, ports=fake_ports())
    for i, name in enumerate(("rel-a", "rel-b", "rel-c")):
        register_release(ctx, release_data(name, **({"EXTRA": str(i)} if i else {})), "U0DEPLOYER")
    return ctx, Engine(ctx, readiness_pause=0)


@pytest.fixture()
def wf(make_ctx):
    return setup(make_ctx)


def run_expiry(ctx, engine) -> str:
    """One scheduled run, through the job's entrypoint with this process's root installed."""
    root = Root(ctx=ctx, engine=engine)
    runtime.install(root)
    try:
        gate_expiry.run()
    finally:
        runtime.uninstall(root)
    run = runs_of(ctx, "gate-expiry", limit=1)[0]
    assert run.ok, run.summary
    return run.summary


def approve(ctx, engine, dep_id, who=APPROVER_1):
    pending = get_deployment(ctx, dep_id).pending
    assert pending is not None
    decide_gate(ctx, dep_id, pending.gate, "approved", who, seen_report_hash=pending.report_hash,
                seen_release_hash=pending.release_hash)
    return engine.advance(dep_id)


def deploy_to_live(ctx, engine, release: str):
    view = engine.advance(request_deploy(ctx, release, "kimi-prod", REQUESTER).id)
    turn = 0
    while view.state != "live":
        turn += 1
        view = approve(ctx, engine, view.id, APPROVER_1 if turn % 2 else ADMIN)
    return view


def reminders(ctx, dep_id: int) -> list[dict]:
    with ctx.uow() as uow:
        return [e.payload for e in uow.events.for_deployment(dep_id) if e.kind == "gate.reminder"]


def test_a_gate_before_apply_is_reminded_once_at_half_time_and_frees_the_endpoint_at_expiry(wf, make_ctx) -> None:
    ctx, engine = wf
    dep = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    assert dep.pending is not None and dep.pending.gate == "artifact"
    start = ctx.clock.now()

    ctx.clock.advance(BEFORE / 2 - dt.timedelta(seconds=1))
    assert run_expiry(ctx, engine) == "no gate is due for a reminder or expiry" and reminders(ctx, dep.id) == []

    ctx.clock.advance(dt.timedelta(seconds=1))
    assert "reminded" in run_expiry(ctx, engine)
    [reminder] = reminders(ctx, dep.id)
    expires = start + BEFORE
    assert reminder["gate"] == "artifact" and dt.datetime.fromisoformat(reminder["expires_at"]) == expires
    text = reminder["text"]
    assert text.startswith(f"<!subteam^{GROUP}> <@U0DEPLOYER>:")  # the approvers mentioned, the requester told
    assert f"<!subteam^{GROUP}> (not the requester) can approve or reject it" in text
    assert f"expires at {expires:%Y-%m-%d %H:%M} UTC (in 12 h)" in text and "kimi-prod is free" in text

    # A second run, and another process on the same database (a restart, or a second replica), remind no more.
    ctx.clock.advance(dt.timedelta(minutes=1))
    run_expiry(ctx, engine)
    other = make_ctx(endpoints=[endpoint_config(approver_group=GROUP)], roles=ROLES, ports=fake_ports())
    run_expiry(other, Engine(other, readiness_pause=0))
    assert len(reminders(ctx, dep.id)) == 1
    with ctx.uow() as uow:
        assert uow.gates.latest(dep.id, "artifact").reminded_at == start + BEFORE / 2

    ctx.clock.set(expires - dt.timedelta(seconds=1))
    run_expiry(ctx, engine)
    assert get_deployment(ctx, dep.id).state == "artifact_gate"
    ctx.clock.set(expires)
    assert f"deployment #{dep.id}: artifact expired (endpoint free)" in run_expiry(ctx, engine)
    ended = get_deployment(ctx, dep.id)
    assert ended.state == "expired" and "nobody decided within 24 h" in ended.state_reason and ended.pending is None
    with ctx.uow() as uow:
        [expiry] = [dict(a.details) for a in uow.audit.list(subject=f"deployment:{dep.id}") if a.action == "gate.expired"]
    assert expiry["gate"] == "artifact" and expiry["allowed_minutes"] == 24 * 60
    assert ctx.ports.cluster.applied == [] and ctx.ports.cluster.admission == []  # users were never touched
    assert request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER).state == "requested"  # the endpoint is free


def test_a_gate_after_apply_expires_in_minutes_and_restores_the_live_release_byte_for_byte(wf) -> None:
    ctx, engine = wf
    live = deploy_to_live(ctx, engine, "rel-a")
    with ctx.uow() as uow:
        live_manifest = uow.deployments.get(live.id).applied_manifest
    cluster = ctx.ports.cluster
    view = engine.advance(request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER).id)
    view = approve(ctx, engine, approve(ctx, engine, view.id).id, ADMIN)
    assert view.state == "model_gate" and cluster.applied[-1] != live_manifest  # the candidate runs, users closed out

    ctx.clock.advance(AFTER / 2)
    assert "model reminded, expires in 15 min" in run_expiry(ctx, engine)
    [reminder] = reminders(ctx, view.id)
    assert "the deployment ends and rel-a is restored" in reminder["text"]

    ctx.clock.advance(AFTER / 2)
    summary = run_expiry(ctx, engine)
    expired = get_deployment(ctx, view.id)
    assert expired.state == "expired" and "the model gate expired" in expired.state_reason
    with ctx.uow() as uow:
        restore = uow.deployments.for_endpoint(uow.endpoints.get("kimi-prod").id)[0]
        restore_id, cause, stored = restore.id, restore.cause_id, restore.applied_manifest
        admission_open = uow.endpoints.get("kimi-prod").admission_open
    assert cause == view.id and f"restore #{restore_id} started" in summary and f"deployment #{restore_id} live" in summary
    restored = get_deployment(ctx, restore_id)
    assert restored.kind == "restore" and restored.release == "rel-a" and restored.state == "live"  # driven by the job
    assert stored == live_manifest and cluster.applied[-1] == live_manifest  # the exact bytes that were live
    assert admission_open and cluster.admission[-1] is True  # users are back, on rel-a
    assert get_deployment(ctx, live.id).state == "superseded"


def test_a_stalled_drain_expires_like_a_gate_reopens_and_applies_nothing(make_ctx) -> None:
    ctx, engine = setup(make_ctx)
    deploy_to_live(ctx, engine, "rel-a")
    ctx.ports.endpoint.drained = False  # from now on requests keep running
    applied = list(ctx.ports.cluster.applied)
    view = engine.advance(request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER).id)
    view = approve(ctx, engine, approve(ctx, engine, view.id).id, ADMIN)
    assert view.state == "drain_stalled"

    ctx.clock.advance(AFTER / 2)
    run_expiry(ctx, engine)
    run_expiry(ctx, engine)
    [reminder] = reminders(ctx, view.id)
    assert reminder["gate"] == "drain" and f"`/kimi drain abort {view.id}`" in reminder["text"]
    assert "users are reopened on the running release" in reminder["text"]

    ctx.clock.advance(AFTER / 2)
    summary = run_expiry(ctx, engine)
    assert f"deployment #{view.id}: drain expired (reopening admission)" in summary
    ended = get_deployment(ctx, view.id)
    assert ended.state == "expired" and "the stalled drain expired" in ended.state_reason
    assert ctx.ports.cluster.applied == applied  # nothing of rel-b reached the cluster
    assert ctx.ports.cluster.admission[-2:] == [False, True]  # closed for the drain, reopened at expiry
    assert request_deploy(ctx, "rel-c", "kimi-prod", REQUESTER).state == "requested"


def test_a_decision_made_just_before_expiry_wins(wf) -> None:
    ctx, engine = wf
    dep = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    ctx.clock.advance(BEFORE - dt.timedelta(seconds=1))
    pending = dep.pending
    decide_gate(ctx, dep.id, "artifact", "approved", APPROVER_1, seen_report_hash=pending.report_hash,
                seen_release_hash=pending.release_hash)
    # The engine has not moved the deployment on yet when the job runs past the expiry: the decision stands.
    ctx.clock.advance(dt.timedelta(minutes=5))
    run_expiry(ctx, engine)
    assert get_deployment(ctx, dep.id).state == "artifact_gate"
    view = engine.advance(dep.id)
    assert view.state == "infrastructure_gate" and view.pending.gate == "infrastructure"
    # The next gate waits from its own report: not expired, not even due for a reminder.
    run_expiry(ctx, engine)
    assert get_deployment(ctx, dep.id).state == "infrastructure_gate" and reminders(ctx, dep.id) == []


def test_the_gate_expiry_job_is_scheduled_every_minute(make_ctx) -> None:
    from bot.adapters.leader import SingleProcess
    from bot.bootstrap import build_root
    from bot.scheduler import JobRunner, make_scheduler

    spec = JOBS["gate-expiry"]
    assert spec.func == "jobs.gate_expiry:run" and spec.period_minutes(make_ctx().settings) == 1
    ctx = make_ctx()
    runner = JobRunner(build_root(ctx), SingleProcess())
    runner.scheduler.start(paused=True)
    runner.ensure_jobs()
    runner.scheduler.shutdown(wait=False)
    stored = make_scheduler(ctx)
    stored.start(paused=True)
    try:
        job = stored.get_job("gate-expiry")
    finally:
        stored.shutdown(wait=False)
    assert job.func_ref == "jobs.gate_expiry:run" and job.trigger.interval == dt.timedelta(minutes=1)
    assert job.max_instances == 1 and job.coalesce


def test_a_run_without_an_engine_changes_nothing_and_says_why(wf) -> None:
    ctx, engine = wf
    dep = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    ctx.clock.advance(BEFORE)
    run = run_job(ctx, "gate-expiry", trigger="manual")
    assert not run.ok and "no deployment engine is configured" in run.summary
    assert get_deployment(ctx, dep.id).state == "artifact_gate"
