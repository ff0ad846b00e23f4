"""Ownership of a rollout across real ``kimi-ops serve`` replicas on one PostgreSQL database.

Two replicas run against the sandbox (the HyperPod operator simulator holds the
rollout while the test acts). A person's approval is recorded in this process
and nobody drives it, so the replicas' periodic takeover picks it up: one
replica claims the endpoint's lease and watches the rollout.

* kill -9 of that replica: the other takes over within the lease bound,
  re-attaches to the rollout watch, applies nothing again;
* SIGTERM and restart of the other replica: its start-up leaves the deployment
  alone, so one model gate runs (one report, one ``gate.checked``).
"""

from __future__ import annotations

import datetime as dt
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.sandbox.slack_stub import SlackStub
from bot.sandbox.stack import APPROVER_2
from bot.services.access import Identity
from bot.services.deployments import decide_gate, get_deployment
from tests.cli_support import CliSandbox, deploy_in_process, start_cli_sandbox, stop_cli_sandbox
from tests.test_crash_recovery import _applies, _record, _watching

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]

CLI = [sys.executable, "-c", "from bot.cli.main import main; main()"]
LEASE_SECONDS, HEARTBEAT_SECONDS, TAKEOVER_SECONDS = 4.0, 1.0, 1.0
BOUND = LEASE_SECONDS + TAKEOVER_SECONDS  # how long a dead driver's deployment may stay undriven
SLACK = 5.0  # scheduling on a shared CI machine: the thread wakes, the watch connects


@dataclass
class Replica:
    proc: subprocess.Popen[str]
    url: str


@pytest.fixture()
def cli(fresh_pg_url: str, tmp_path: Path) -> Iterator[CliSandbox]:
    sandbox = start_cli_sandbox(tmp_path, database_url=fresh_pg_url)
    try:
        yield sandbox
    finally:
        stop_cli_sandbox(sandbox)


@pytest.fixture()
def stub() -> Iterator[SlackStub]:
    with SlackStub() as slack:
        yield slack


def start(cli: CliSandbox, stub: SlackStub, name: str) -> Replica:
    home = cli.cwd / name
    home.mkdir(exist_ok=True)
    env = {**cli.env, "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "replica-takeover-secret",
           "KIMI_SLACK_API_URL": stub.api_url, "KIMI_LEASE_SECONDS": str(LEASE_SECONDS),
           "KIMI_LEASE_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS), "KIMI_LEASE_TAKEOVER_SECONDS": str(TAKEOVER_SECONDS)}
    proc = subprocess.Popen([*CLI, "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=home, env=env)
    line = proc.stdout.readline()  # type: ignore[union-attr]
    found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
    if not found:
        proc.kill()
        raise AssertionError(line + proc.communicate()[1])
    return Replica(proc, found.group(1))


def stop(replica: Replica, sig: int = signal.SIGTERM) -> None:
    if replica.proc.poll() is None:
        replica.proc.send_signal(sig)
    try:
        replica.proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        replica.proc.kill()
        replica.proc.communicate()


def wait_for(what: str, condition: Callable[[], Any], limit: float = 90.0) -> Any:
    deadline = time.monotonic() + limit
    while not (result := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"not within {limit:g} s: {what}")
        time.sleep(0.1)
    return result


def holder_pid(cli: CliSandbox, deployment_id: int) -> int | None:
    """The pid of the replica whose lease on the deployment's endpoint is alive (the holder names it)."""
    with cli.ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        lease = uow.leases.get(dep.endpoint_id)
        if lease is None or lease.expires_at <= dt.datetime.now(dt.UTC) or lease.deployment_id != deployment_id:
            return None
        return int(lease.holder.rsplit("-", 2)[1])


def approved_nobody_driving(cli: CliSandbox, release: str) -> int:
    """A deploy whose infrastructure gate a person approved here, left for the replicas to drive (a takeover)."""
    dep = deploy_in_process(cli, release, until="infrastructure_gate")
    decide_gate(cli.ctx, dep.id, "infrastructure", "approved", Identity(APPROVER_2),
                seen_report_hash=dep.pending.report_hash, seen_release_hash=dep.pending.release_hash)
    return int(dep.id)


def test_the_driving_replica_killed_mid_rollout_is_taken_over_within_the_bound(cli: CliSandbox, stub: SlackStub) -> None:
    release = cli.sandbox.releases[0].name
    operator = cli.sandbox.stand_ins["operator"]
    operator.behaviour = "hang"  # the operator holds the rollout at DeploymentInProgress
    a, b = start(cli, stub, "a"), start(cli, stub, "b")
    try:
        dep = approved_nobody_driving(cli, release)
        wait_for("a replica watching the rollout", lambda: _watching(cli, dep))
        driver = wait_for("the driver's lease", lambda: holder_pid(cli, dep))
        dead, alive = (a, b) if driver == a.proc.pid else (b, a)
        assert driver == dead.proc.pid
        _, events_at_kill = _record(cli, dep)
        assert len(_applies(cli)) == 1

        dead.proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        dead.proc.communicate()
        wait_for("the other replica re-attached to the rollout watch",
                 lambda: _watching(cli, dep, after_event=events_at_kill[-1][0]), limit=BOUND + SLACK + 30)
        taken_after = time.monotonic() - killed_at
        assert taken_after < BOUND + SLACK, f"taken over after {taken_after:.1f} s"
        assert holder_pid(cli, dep) == alive.proc.pid

        operator.behaviour = "succeed"
        wait_for("the model gate", lambda: get_deployment(cli.ctx, dep).state == "model_gate")
        assert len(_applies(cli)) == 1  # re-attached, never re-applied
        audit, _ = _record(cli, dep)
        actions = [action for _, action in audit]
        for once in ("manifest.rendered", "deployment.applying", "deployment.rolling_out", "deployment.readiness",
                     "deployment.model_gate"):
            assert actions.count(once) == 1, (once, actions)
    finally:
        stop(a)
        stop(b)


def test_a_replica_restarted_mid_rollout_leaves_it_to_its_driver(cli: CliSandbox, stub: SlackStub) -> None:
    release = cli.sandbox.releases[0].name
    operator = cli.sandbox.stand_ins["operator"]
    operator.behaviour = "hang"
    a, b = start(cli, stub, "a"), start(cli, stub, "b")
    replicas = [a, b]
    try:
        dep = approved_nobody_driving(cli, release)
        wait_for("a replica watching the rollout", lambda: _watching(cli, dep))
        driver = wait_for("the driver's lease", lambda: holder_pid(cli, dep))
        other = b if driver == a.proc.pid else a

        stop(other)  # a rolling update: SIGTERM, then the new pod starts and resumes what it may
        restarted = start(cli, stub, "restarted")
        replicas.append(restarted)
        time.sleep(LEASE_SECONDS)  # its start-up resume and a few takeover rounds have run by now
        assert holder_pid(cli, dep) == driver

        operator.behaviour = "succeed"
        wait_for("the model gate's report", lambda: _model_reports(cli, dep) >= 1)
        time.sleep(2 * TAKEOVER_SECONDS + 2)  # a second runner would have run its gate and posted by now
        assert _model_reports(cli, dep) == 1  # one model gate run
        audit, _ = _record(cli, dep)
        assert [a for _, a in audit].count("gate.checked") == 3  # artifact, infrastructure, model
    finally:
        for replica in replicas:
            stop(replica)


def _model_reports(cli: CliSandbox, dep: int) -> int:
    with cli.ctx.uow() as uow:
        return sum(1 for g in uow.gates.for_deployment(dep) if g.gate == "model")
