"""Three real ``kimi-ops serve`` replicas on one database, for the tests that kill or cancel under them (issue 35).

One sandbox, one Slack stub and three replicas serve a module (a replica takes seconds to start): the ``replicas``
fixture of ``tests/stack/conftest.py``. Each test hands a deploy to the replicas (``handed``: its infrastructure
gate approved here, so their takeover round picks it up: one claims the endpoint's lease and drives) and ends it
with the previous release restored, so the next test finds the endpoint free. A test that kills the driver may
start its replacement at once (``Pool.start``, as Kubernetes would), so that start overlaps the takeover; the next
hand-over waits for every replica started. Each replica dies with this test process (its parent-death signal), so
none outlives a run.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import update

from bot.adapters.store.models import Event
from bot.domain.checks import GateReport
from bot.domain.read_models import DeploymentView
from bot.sandbox.slack_stub import SlackSender, SlackStub
from bot.sandbox.stack import ADMIN, APPROVER_2, DEPLOYER
from bot.services.access import Identity
from bot.services.deployments import cancel, decide_gate, get_deployment, history
from bot.services.engine import Engine
from tests.cli_support import QUICK_SWEEP, CliSandbox, deploy_in_process, start_cli_sandbox, stop_cli_sandbox
from tests.stack.test_replica_takeover import holder_pid
from tests.world_support import wait_until

SECRET = "three-replicas-signing-secret"
# Each replica ends with this test process (its pdeath signal): a run killed at a test's timeout leaves no serve.
TIED_CLI = [sys.executable, "-c", f"from bot.cli.orphan_guard import die_with; die_with({os.getpid()}); "
            "from bot.cli.main import main; main()"]
# A lease long enough that ``resume`` run right after a kill still finds it (a lapsed lease of a hung rollout would
# be taken over by the resume itself), short enough that a takeover comes within seconds.
LEASE = {"KIMI_LEASE_SECONDS": "6", "KIMI_LEASE_HEARTBEAT_SECONDS": "1", "KIMI_LEASE_TAKEOVER_SECONDS": "1"}
# The replicas' sweep: its first level alone would run all day (this process's own, for the live release, is quick).
ENDLESS_SWEEP = {**QUICK_SWEEP, "steady_seconds": 86_400, "steady_requests_per_slot": 1_000_000,
                 "max_requests": 10_000_000, "max_seconds": 86_400}
# No test here ramps: the release made live when the pool starts goes straight from its cohort to everyone.
NO_RAMP = {"steps": [], "soak_seconds": 0}
WAIT_SECONDS = 120  # a bound on waiting for another process, not a performance expectation
FREE_AGAIN_SECONDS = 300


@dataclass
class Replica:
    proc: subprocess.Popen[str]
    log: Path
    url: str = ""
    sweep: dict[str, object] | None = None  # its own sweep plan, in place of the replicas' endless one


@dataclass
class Pool:
    cli: CliSandbox
    stub: SlackStub
    config: Path  # the replicas' settings file: the sandbox's, with the endless sweep
    replicas: list[Replica] = field(default_factory=list)

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.proc.poll() is None]

    def start(self, count: int, sweep: dict[str, object] | None = None) -> None:
        """Launch ``count`` replicas side by side (with ``sweep`` as their plan if given), without waiting for them."""
        for _ in range(count):
            self.replicas.append(self._launch(f"r{len(self.replicas)}", sweep))

    def ensure(self, count: int, sweep: dict[str, object] | None = None) -> None:
        """Start replicas until ``count`` run, and wait until every one started serves."""
        self.start(count - len(self.live()), sweep)
        for replica in self.replicas:
            if replica.url:
                continue
            line = replica.proc.stdout.readline()  # type: ignore[union-attr]
            found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
            assert found, line + replica.log.read_text(errors="replace")[-4000:]
            replica.url = found.group(1)

    def _launch(self, name: str, sweep: dict[str, object] | None) -> Replica:
        home = self.cli.cwd / name
        home.mkdir()
        env = {**self.cli.env, **LEASE, "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": SECRET,
               "KIMI_SLACK_API_URL": self.stub.api_url, "KIMI_CONFIG": str(self.config)}
        if sweep is not None:
            env["KIMI_TRAFFIC_SWEEP"] = json.dumps(sweep)  # the environment wins over the settings file
        log = home / "stderr.log"
        with log.open("w") as err:  # a file, not a pipe: nobody reads the log while the replica runs
            proc = subprocess.Popen([*TIED_CLI, "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs"],
                                    stdout=subprocess.PIPE, stderr=err, text=True, cwd=home, env=env)
        return Replica(proc, log, sweep=sweep)

    def kill(self, pid: int) -> Replica:
        """kill -9 the replica ``pid`` (its worker goes with it)."""
        [replica] = [r for r in self.live() if r.proc.pid == pid]
        replica.proc.send_signal(signal.SIGKILL)
        replica.proc.communicate()
        return replica


def end(*replicas: Replica) -> None:
    """SIGTERM to each at once, then wait for each (a replica's graceful stop takes seconds on a busy machine)."""
    for replica in replicas:
        if replica.proc.poll() is None:
            replica.proc.send_signal(signal.SIGTERM)
    for replica in replicas:
        try:
            replica.proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            replica.proc.kill()
            replica.proc.communicate()


def serve_pool(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, count: int = 3) -> Iterator[Pool]:
    """The module's sandbox (SQLite or PostgreSQL: ``request.param``), a live release and ``count`` replicas."""
    url = request.getfixturevalue("module_pg_url") if request.param == "postgres" else None
    with pytest.MonkeyPatch.context() as env:
        for name in list(os.environ):  # as every test starts: nothing of the machine's Slack, AWS or kimi-ops settings
            if name.startswith(("SLACK_", "AWS_", "KIMI_")):
                env.delenv(name)
        cli = start_cli_sandbox(tmp_path_factory.mktemp(f"three-{request.param}"), database_url=url,
                                endpoint={"drain_seconds": 3600, "ramp": NO_RAMP})
        try:
            deploy_in_process(cli, cli.sandbox.releases[0].name)  # live: what each test's restore gives users back
            told_already(cli)
            config = cli.cwd / "replicas-settings.yaml"
            config.write_text(yaml.safe_dump({**yaml.safe_load(Path(cli.env["KIMI_CONFIG"]).read_text()),
                                              "traffic_sweep": ENDLESS_SWEEP}))
            with SlackStub() as stub:
                replicas = Pool(cli, stub, config)
                try:
                    replicas.ensure(count)
                    yield replicas
                finally:
                    end(*replicas.replicas)
        finally:
            stop_cli_sandbox(cli)


def told_already(cli: CliSandbox) -> None:
    """Mark the outbox so far delivered: the live release's Slack thread is no test's business here, and replicas
    that start with it undelivered each drew its plots (a worker's import of matplotlib and three figures)."""
    with cli.ctx.uow() as uow:
        uow.session.execute(update(Event).where(Event.delivered_at.is_(None)).values(delivered_at=dt.datetime.now(dt.UTC)))
        uow.commit()


def hand_over(pool: Pool, count: int = 3) -> Iterator[int]:
    """A deploy of the release not live, approved here up to its apply and left to ``count`` replicas; at the end,
    cancelled if still in flight and its restore driven to live, so the endpoint is free for the next test."""
    cli = pool.cli
    pool.ensure(count)
    live = {v.release for v in history(cli.ctx) if v.state == "live"}
    release = next(r.name for r in cli.sandbox.releases if r.name not in live)
    started = deploy_in_process(cli, release, until="infrastructure_gate")

    def gate_waiting() -> DeploymentView | None:  # a replica may be the one running the gate's checks
        view = get_deployment(cli.ctx, started.id)
        return view if view.pending is not None and view.pending.gate == "infrastructure" else None

    try:  # from here on the endpoint is freed for the next test whatever happens
        dep = wait_until("the infrastructure gate's report stored", gate_waiting, WAIT_SECONDS, poll=0.2)
        assert dep.pending is not None
        decide_gate(cli.ctx, dep.id, "infrastructure", "approved", Identity(APPROVER_2),
                    seen_report_hash=dep.pending.report_hash, seen_release_hash=dep.pending.release_hash)
        yield dep.id
    finally:
        cli.sandbox.stand_ins["operator"].behaviour = "succeed"
        cli.sandbox.stand_ins["openai"].release()
        if get_deployment(cli.ctx, started.id).in_flight:
            cancel(cli.ctx, started.id, Identity(ADMIN))
        restore = restore_of(cli, started.id)
        if restore is not None:
            Engine(cli.ctx, readiness_pause=0.2).advance(restore[0])  # at once, unless a replica drives it already
        # The restore is a whole rollout, readiness and reopen, driven by whichever replica holds it: on a slow host
        # (a CI run with the host's CPU at half speed) it outlasted the two minutes. A bound on a hang, saying what
        # is still in flight if it is one.
        def in_flight() -> list[tuple[int, str, str]]:
            return [(v.id, v.release, v.state) for v in history(cli.ctx) if v.in_flight]

        wait_until("the endpoint free again", lambda: not in_flight(), FREE_AGAIN_SECONDS, poll=0.2, found=in_flight)


def state_of(cli: CliSandbox, deployment_id: int) -> str:
    """The stored state (one row read: a third of the CPU of the deployment's whole view, for the tight polls)."""
    with cli.ctx.uow() as uow:
        return str(uow.deployments.get(deployment_id).state)


def restore_of(cli: CliSandbox, deployment_id: int) -> tuple[int, str] | None:
    """The restore a deployment's end started (its id and state), if any."""
    with cli.ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        for row in uow.deployments.for_endpoint(dep.endpoint_id):
            if row.cause_id == deployment_id:
                return row.id, row.state
    return None


def pending_report(cli: CliSandbox, deployment_id: int, gate: str) -> GateReport | None:
    view = get_deployment(cli.ctx, deployment_id)
    return GateReport.model_validate(view.pending.report) if view.pending and view.pending.gate == gate else None


def holder_name(cli: CliSandbox, deployment_id: int) -> str:
    with cli.ctx.uow() as uow:
        return str(uow.leases.get(uow.deployments.get(deployment_id).endpoint_id).holder)


def cancel_on_another(pool: Pool, deployment_id: int) -> Replica:
    """``/kimi cancel`` signed as Slack signs it, into a replica that does not drive the deployment (returned)."""
    driver = wait_until("the driver's lease", lambda: holder_pid(pool.cli, deployment_id), WAIT_SECONDS)
    other = next(r for r in pool.live() if r.proc.pid != driver)
    sender = SlackSender(SECRET, pool.stub)
    body = sender.slash(DEPLOYER, f"cancel {deployment_id}")
    answer = httpx.post(f"{other.url}/slack/events", content=body.encode(), headers=sender.headers(body), timeout=30)
    assert answer.status_code == 200, answer.text
    return other


def sweeping(pool: Pool, deployment_id: int) -> None:
    """Approve the model gate and wait until a replica's traffic gate sweep has answers in."""
    cli = pool.cli
    report = wait_until("the model gate's report", lambda: (view := get_deployment(cli.ctx, deployment_id)).pending
                        and view.pending.gate == "model" and view.pending, WAIT_SECONDS, poll=0.2)
    decide_gate(cli.ctx, deployment_id, "model", "approved", Identity(APPROVER_2),
                seen_report_hash=report.report_hash, seen_release_hash=report.release_hash)

    def answered() -> bool:
        with cli.ctx.uow() as uow:
            row = uow.deployments.get(deployment_id)
            return row.state == "traffic_gate" and (row.own_requests or 0) >= 3

    wait_until("a replica's sweep answered", answered, WAIT_SECONDS, poll=0.2)
