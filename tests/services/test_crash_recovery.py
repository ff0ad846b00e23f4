"""Crash safety: a ``kimi-ops`` process killed mid-rollout, and deployments whose stored state cannot be resumed.

The first test kills (SIGKILL, no chance to clean up) a real ``kimi-ops gate
approve`` process while it follows a rollout the HyperPod operator simulator
holds, then runs ``kimi-ops resume`` in this process (first while the dead one's lease
is alive: it is left alone; then, on a thread, once the lease lapsed): the deployment is re-attached to its
rollout watch from the stored state, reaches its next gate and, after
approvals, goes live; the cluster saw one apply, and every audit row and outbox
event written before the kill is still there. It runs on SQLite and PostgreSQL.

The second: a deployment whose stored state cannot be continued is marked
``interrupted`` with the reason by the same ``resume`` (and bot start-up) path,
releasing its endpoint, instead of holding it for ever.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.adapters.cluster.rest import object_path
from bot.sandbox.stack import APPROVER_2, DEPLOYER, ENDPOINT, NAMESPACE
from bot.services.access import Identity
from bot.services.deployments import (
    decide_gate,
    get_deployment,
    in_flight,
    request_deploy,
)
from bot.services.engine import Engine
from bot.services.errors import Refused
from tests.cli_support import (
    CliSandbox,
    approve_in_process,
    deploy_in_process,
    run_in_process,
    start_cli_sandbox,
    stop_cli_sandbox,
)
from tests.workflow_support import APPROVER_1, REQUESTER, workflow
from tests.world_support import wait_until

# Whole-stack: a kimi-ops subprocess is killed mid-rollout and another resumes it.
pytestmark = pytest.mark.timeout(600)

WAIT_SECONDS = 90  # a bound on waiting for another process, not a performance expectation


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CliSandbox]:
    url = request.getfixturevalue("fresh_pg_url") if request.param == "postgres" else None
    sandbox = start_cli_sandbox(tmp_path, database_url=url)
    try:
        yield sandbox
    finally:
        stop_cli_sandbox(sandbox)


def _wait_for(what: str, condition: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    """Poll until ``condition`` holds; fail (with the process's output) if it exits or the bound passes first."""
    def holds() -> bool:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"kimi-ops exited ({proc.returncode}) before {what}:\n{out}\n{err}")
        return condition()

    wait_until(what, holds, WAIT_SECONDS, poll=0.1)


def _record(cli: CliSandbox, deployment_id: int) -> tuple[list[tuple[int, str]], list[tuple[int, str, Any]]]:
    """The deployment's audit rows (id, action) and outbox events (id, kind, payload), oldest first."""
    with cli.ctx.uow() as uow:
        audit = sorted((a.id, a.action) for a in uow.audit.list(subject=f"deployment:{deployment_id}", limit=1000))
        events = [(e.id, e.kind, e.payload) for e in uow.events.for_deployment(deployment_id)]
    return audit, events


def _watching(cli: CliSandbox, deployment_id: int, after_event: int = 0) -> bool:
    """A rollout watch has reported the operator's DeploymentInProgress (after event ``after_event``)."""
    _, events = _record(cli, deployment_id)
    return any(i > after_event and kind == "rollout.progress" and payload.get("state") == "DeploymentInProgress"
               for i, kind, payload in events)


def _lease_expiry(cli: CliSandbox, deployment_id: int) -> dt.datetime | None:
    with cli.ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        lease = uow.leases.get(dep.endpoint_id) if dep is not None else None
        return lease.expires_at if lease is not None else None


def _lease_alive(cli: CliSandbox, deployment_id: int) -> bool:
    expiry = _lease_expiry(cli, deployment_id)
    return expiry is not None and expiry > dt.datetime.now(dt.UTC)


def _wait_for_lapse(cli: CliSandbox, deployment_id: int) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while _lease_alive(cli, deployment_id):
        assert time.monotonic() < deadline, "the dead process's lease never lapsed"
        time.sleep(0.2)


def _applies(cli: CliSandbox) -> list[Any]:
    """Every real (not dry-run) server-side apply of the manifest the cluster received for the endpoint object.

    The admission annotation's own field manager (``kimi-ops-admission``, reopening users at the end) is not one.
    """
    kube = cli.sandbox.stand_ins["kube"]
    requests = kube.requests()
    path = object_path("InferenceEndpointConfig", ENDPOINT, NAMESPACE)
    return [r for r in requests if r.method == "PATCH" and r.url.path == path and "dryRun" not in r.params
            and r.params.get("fieldManager") == "kimi-ops"]


def _endpoint_object(cli: CliSandbox) -> dict[str, Any]:
    obj = cli.sandbox.stand_ins["kube"].rest().get(object_path("InferenceEndpointConfig", ENDPOINT, NAMESPACE))
    assert obj is not None
    return obj


def _early_start_up(cli: CliSandbox, operator: Any) -> subprocess.CompletedProcess[str]:
    """``kimi-ops resume`` in this process while the dead one's lease is alive, within a bound.

    A hang guard, not a performance expectation: had the lease lapsed before it looked (a machine so busy that its
    start-up outlasted the lease), it would take over the rollout the operator holds and follow it without end.
    """
    done: list[subprocess.CompletedProcess[str]] = []
    runner = threading.Thread(target=lambda: done.append(run_in_process(["resume"], cli.env, cli.cwd)),
                              name="early-resume", daemon=True)
    runner.start()
    runner.join(WAIT_SECONDS)
    if not done:
        operator.behaviour = "succeed"  # the take-over's watch then ends, and nothing of it outlives the test
        runner.join(WAIT_SECONDS)
        pytest.fail(f"the early `kimi-ops resume` had not returned after {WAIT_SECONDS} s: the dead process's "
                    f"{cli.env['KIMI_LEASE_SECONDS']} s lease lapsed first and it took the held rollout over "
                    "(KIMI_LEASE_SECONDS is too short for this machine's start-up)")
    return done[0]


def _resume_in_this_process(cli: CliSandbox) -> tuple[threading.Thread, list[subprocess.CompletedProcess[str]]]:
    """``kimi-ops resume`` in this process, on a thread (a second actor: only the killed one needs a process of its
    own); the thread and where its result lands."""
    done: list[subprocess.CompletedProcess[str]] = []
    runner = threading.Thread(target=lambda: done.append(run_in_process(["resume"], cli.env, cli.cwd)),
                              name="resume", daemon=True)
    runner.start()
    return runner, done


def _wait_while(runner: threading.Thread, done: list[subprocess.CompletedProcess[str]], what: str,
                condition: Callable[[], bool]) -> None:
    """Poll until ``condition`` holds; fail (with what the command printed) if it returns or the bound passes first."""
    def holds() -> bool:
        if not runner.is_alive():
            said = f"exit {done[0].returncode}\n{done[0].stdout}\n{done[0].stderr}" if done else "(no result)"
            pytest.fail(f"`kimi-ops resume` returned before {what}:\n{said}")
        return condition()

    wait_until(what, holds, WAIT_SECONDS, poll=0.1)


def test_cli_killed_mid_rollout_resumes_the_watch_and_applies_nothing_twice(cli: CliSandbox) -> None:
    release, other = (r.name for r in cli.sandbox.releases)
    operator = cli.sandbox.stand_ins["operator"]
    dep = deploy_in_process(cli, release, until="infrastructure_gate").id

    operator.behaviour = "hang"  # the operator holds the rollout at DeploymentInProgress
    # A lease that outlasts the early start-up below, which runs in this process right after the kill (a tenth of a
    # second idle, a few seconds on a machine busy with other work), and is short enough to wait out.
    cli.env.update(KIMI_LEASE_SECONDS="8", KIMI_LEASE_HEARTBEAT_SECONDS="1")
    approving = cli.popen("gate", "approve", str(dep), "infrastructure", "--as", APPROVER_2)
    try:
        _wait_for("rollout watch", lambda: _watching(cli, dep), approving)
        # Killed just after a heartbeat renewed its lease: the whole lease is left for the early start-up.
        renewed = _lease_expiry(cli, dep)
        _wait_for("lease renewal", lambda: _lease_expiry(cli, dep) != renewed, approving)
    finally:
        os.kill(approving.pid, signal.SIGKILL)
        approving.communicate()
    assert approving.returncode == -signal.SIGKILL

    audit_at_kill, events_at_kill = _record(cli, dep)
    applied_at_kill = _applies(cli)
    generation = _endpoint_object(cli)["metadata"]["generation"]
    assert len(applied_at_kill) == 1
    # The killed process's decision and its move to rolling_out were committed before it died.
    assert [a for _, a in audit_at_kill].count("gate.approved") == 2 and audit_at_kill[-1][1] == "deployment.rolling_out"
    # The dead process still holds the endpoint: the stored state, not the process, is what counts.
    view = get_deployment(cli.ctx, dep)
    assert view.state == "rolling_out" and view.in_flight
    with pytest.raises(Refused, match=rf"already has deployment #{dep} .*rolling out"):
        request_deploy(cli.ctx, other, None, Identity(DEPLOYER))

    # While the dead process's lease is alive, a start-up leaves the deployment alone (it might still be driving) …
    early = _early_start_up(cli, operator)
    assert _lease_alive(cli, dep), "the lease lapsed during the early start-up: KIMI_LEASE_SECONDS is too short here"
    assert _record(cli, dep)[1] == events_at_kill
    # It says so, and that it could act on nothing: exit 1, with whose lease it is and when it lapses.
    assert early.returncode == 1, cli.explain(early)
    assert re.search(rf"left deployment #{dep}: it is driven by \S+ until \d\d:\d\d:\d\d UTC; it lapses in \d+ s",
                     early.stdout), cli.explain(early)
    # … and once the lease lapsed, the next start-up takes it over.
    _wait_for_lapse(cli, dep)
    resuming, done = _resume_in_this_process(cli)
    try:
        # Re-attached: a new watch reports the rollout the operator still holds …
        _wait_while(resuming, done, "resumed rollout watch",
                    lambda: _watching(cli, dep, after_event=events_at_kill[-1][0]))
        operator.behaviour = "succeed"  # … and follows it to the end.
        resuming.join(WAIT_SECONDS)
    finally:
        if resuming.is_alive():  # the watch then ends, and nothing of it outlives the test
            operator.behaviour = "succeed"
            resuming.join(WAIT_SECONDS)
    assert done, f"`kimi-ops resume` had not returned {WAIT_SECONDS} s after the rollout was let through"
    assert done[0].returncode == 0, cli.explain(done[0])
    out = done[0].stdout
    headline = next(line for line in out.splitlines() if line.startswith(f"deployment #{dep}:"))
    assert headline.startswith(
        f"deployment #{dep}: deploy of {release} to {ENDPOINT} — model gate (readiness completion answered")

    # Nothing applied twice: no new apply reached the cluster, and the object's generation did not move.
    assert len(_applies(cli)) == 1
    assert _endpoint_object(cli)["metadata"]["generation"] == generation
    audit, events = _record(cli, dep)
    # Nothing lost: every row and event from before the kill is still there, in order, and the rest follow it.
    assert audit[:len(audit_at_kill)] == audit_at_kill
    assert [e[:2] for e in events[:len(events_at_kill)]] == [e[:2] for e in events_at_kill]
    actions = [action for _, action in audit]
    for once in ("manifest.rendered", "deployment.closing", "deployment.draining", "deployment.applying",
                 "deployment.rolling_out", "deployment.readiness", "deployment.model_gate"):
        assert actions.count(once) == 1, (once, actions)
    moves = [payload["to"] for _, kind, payload in events if kind == "deployment.state"]
    assert moves == ["artifact_gate", "infrastructure_gate", "closing", "draining", "applying", "rolling_out", "readiness",
                     "model_gate"]

    view = approve_in_process(cli, dep)
    assert view.state == "live"
    # Accepting the traffic gate's limits applies them at once (a recorded manifest revision); nothing else re-applied.
    revised = [action for _, action in _record(cli, dep)[0]].count("manifest.revised")
    assert len(_applies(cli)) == 1 + revised
    if not revised:
        assert _endpoint_object(cli)["metadata"]["generation"] == generation


# ---------------------------------------------------------------------------- stored state that cannot be resumed


@pytest.fixture()
def wf(make_ctx):
    return workflow(make_ctx, releases=2)


def _lose_manifest(uow: Any, dep: Any) -> str:
    # What a hand edit (or a version that stored no manifest) leaves: a rollout with nothing to watch.
    dep.state, dep.applied_manifest, dep.manifest_hash = "rolling_out", None, None
    return "not resumed after a restart while rolling out: no applied manifest is stored for its rolling out step"


def _garble_manifest(uow: Any, dep: Any) -> str:
    # A rollout whose stored manifest no longer parses: re-applying or watching it would be a guess.
    dep.state, dep.applied_manifest = "rolling_out", "kind: [InferenceEndpointConfig\n  spec: {"
    return "not resumed after a restart while rolling out: its stored manifest can no longer be read"


def _garble_endpoint(uow: Any, dep: Any) -> str:
    # An endpoint dropped from the settings file keeps the row an older version stored, with a kind this one refuses.
    dep.endpoint.settings = {**dep.endpoint.settings, "kind": "sagemaker-classic"}
    return "not resumed after a restart while infrastructure gate: its stored release or endpoint settings can no longer be read"


@pytest.mark.parametrize("damage", [_lose_manifest, _garble_manifest, _garble_endpoint],
                         ids=["manifest-lost", "manifest-unreadable", "endpoint-unreadable"])
def test_resume_marks_a_deployment_it_cannot_continue_interrupted_with_the_reason(wf, damage) -> None:
    ctx, engine = wf
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    pending = view.pending
    decide_gate(ctx, view.id, "artifact", "approved", APPROVER_1,
                seen_report_hash=pending.report_hash, seen_release_hash=pending.release_hash)
    engine.advance(view.id)  # waiting at the infrastructure gate
    with ctx.uow() as uow:
        expected = damage(uow, uow.deployments.get(view.id))
        uow.commit()

    resumed = Engine(ctx, readiness_pause=0).resume_all()  # what `kimi-ops resume` and the bot's start-up run

    assert [v.id for v in resumed] == [view.id]
    after = get_deployment(ctx, view.id)
    assert after.state == "interrupted" and after.state_reason.startswith(expected), after.state_reason
    # The endpoint is free again, the thread hears why, and the audit log has it.
    assert not after.in_flight and in_flight(ctx) == []
    with ctx.uow() as uow:
        events = [e.payload for e in uow.events.for_deployment(view.id) if e.kind == "deployment.state"]
        audit = [(a.actor, a.details["reason"]) for a in uow.audit.list(subject=f"deployment:{view.id}")
                 if a.action == "deployment.interrupted"]
    assert events[-1]["to"] == "interrupted" and events[-1]["reason"] == after.state_reason
    assert audit == [("kimi-ops", after.state_reason)]
