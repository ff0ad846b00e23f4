"""Three real ``kimi-ops serve`` replicas on one database: a crash or a cancel anywhere never blocks, strands or
slanders a deployment (issue 35).

One sandbox, one Slack stub and three replicas serve the module (a replica takes seconds to start). Each test
hands a deploy to the replicas (its infrastructure gate approved here, so their takeover round picks it up: one
claims the endpoint's lease and drives) and ends it with the previous release restored, so the next test finds the
endpoint free. Each replica dies with this test process (its parent-death signal), so none outlives a run.

* kill -9 of the driving replica while its model gate's evaluation has requests in flight: another replica takes
  over and runs the gate again, and the closed-door check counts the dead run's requests: no user reached the
  candidate, so it does not fail; requests from elsewhere that did reach it fail it;
* ``/kimi cancel``, signed as Slack signs it, sent to a replica that does not drive the stuck rollout: the driver
  hears of it at its lease heartbeat and starts the restore, whatever the rollout limit;
* kill -9 of the driving replica while its traffic gate's sweep has a request in flight: a replica with a sweep
  that ends takes over and sweeps again; its closed-door check counts the dead run's requests and does not fail;
* ``kimi-ops resume`` right after the driver's kill: it names who holds the deployment until when, and exits 1;
* the same cancel while the driver drains (a request held at the model, an hour's drain deadline) or runs its
  traffic gate's sweep (the replicas' plan has a day's budget): the step ends at once and the deployment is
  cancelled (reopened before the apply, restored after it), never waiting for the step to end by itself.
"""

from __future__ import annotations

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

from bot.domain.checks import GateReport
from bot.sandbox.slack_stub import SlackSender, SlackStub
from bot.sandbox.stack import ADMIN, APPROVER_2, DEPLOYER
from bot.services.access import Identity
from bot.services.deployments import cancel, decide_gate, get_deployment, history
from bot.services.engine import Engine
from tests.cli_support import (
    QUICK_SWEEP,
    CliSandbox,
    deploy_in_process,
    run_in_process,
    start_cli_sandbox,
    stop_cli_sandbox,
)
from tests.services.test_crash_recovery import _applies, _record, _watching
from tests.stack.test_replica_takeover import holder_pid
from tests.world_support import in_background, joined, wait_until

pytestmark = pytest.mark.timeout(600)

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
WAIT_SECONDS = 120  # a bound on waiting for another process, not a performance expectation


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

    def ensure(self, count: int, sweep: dict[str, object] | None = None) -> None:
        """Start replicas (side by side, with ``sweep`` as their plan if given) until ``count`` run."""
        launched = [self._launch(f"r{len(self.replicas) + n}", sweep) for n in range(count - len(self.live()))]
        self.replicas.extend(launched)
        for replica in launched:
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


def end(replica: Replica) -> None:
    if replica.proc.poll() is None:
        replica.proc.send_signal(signal.SIGTERM)
    try:
        replica.proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        replica.proc.kill()
        replica.proc.communicate()


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def pool(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    url = request.getfixturevalue("module_pg_url") if request.param == "postgres" else None
    with pytest.MonkeyPatch.context() as env:
        for name in list(os.environ):  # as every test starts: nothing of the machine's Slack, AWS or kimi-ops settings
            if name.startswith(("SLACK_", "AWS_", "KIMI_")):
                env.delenv(name)
        cli = start_cli_sandbox(tmp_path_factory.mktemp(f"three-{request.param}"), database_url=url,
                                endpoint={"drain_seconds": 3600})
        try:
            deploy_in_process(cli, cli.sandbox.releases[0].name)  # live: what each test's restore gives users back
            config = cli.cwd / "replicas-settings.yaml"
            config.write_text(yaml.safe_dump({**yaml.safe_load(Path(cli.env["KIMI_CONFIG"]).read_text()),
                                              "traffic_sweep": ENDLESS_SWEEP}))
            with SlackStub() as stub:
                replicas = Pool(cli, stub, config)
                try:
                    replicas.ensure(3)
                    yield replicas
                finally:
                    for replica in replicas.replicas:
                        end(replica)
        finally:
            stop_cli_sandbox(cli)


@pytest.fixture()
def handed(pool: Pool) -> Iterator[int]:
    """A deploy of the release not live, approved here up to its apply and left to the replicas; at the end,
    cancelled if still in flight and its restore driven to live, so the endpoint is free for the next test."""
    cli = pool.cli
    pool.ensure(3)
    live = {v.release for v in history(cli.ctx) if v.state == "live"}
    release = next(r.name for r in cli.sandbox.releases if r.name not in live)
    dep = deploy_in_process(cli, release, until="infrastructure_gate")
    decide_gate(cli.ctx, dep.id, "infrastructure", "approved", Identity(APPROVER_2),
                seen_report_hash=dep.pending.report_hash, seen_release_hash=dep.pending.release_hash)
    try:
        yield dep.id
    finally:
        cli.sandbox.stand_ins["operator"].behaviour = "succeed"
        cli.sandbox.stand_ins["openai"].release()
        if get_deployment(cli.ctx, dep.id).in_flight:
            cancel(cli.ctx, dep.id, Identity(ADMIN))
        restore = _restore_of(cli, dep.id)
        if restore is not None:
            Engine(cli.ctx, readiness_pause=0.2).advance(restore[0])  # at once, unless a replica drives it already
        wait_until("the endpoint free again", lambda: not any(v.in_flight for v in history(cli.ctx)), WAIT_SECONDS,
                   poll=0.2)


def _state(cli: CliSandbox, deployment_id: int) -> str:
    return get_deployment(cli.ctx, deployment_id).state


def _restore_of(cli: CliSandbox, deployment_id: int) -> tuple[int, str] | None:
    with cli.ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        for row in uow.deployments.for_endpoint(dep.endpoint_id):
            if row.cause_id == deployment_id:
                return row.id, row.state
    return None


def _pending_report(cli: CliSandbox, deployment_id: int, gate: str) -> GateReport | None:
    view = get_deployment(cli.ctx, deployment_id)
    return GateReport.model_validate(view.pending.report) if view.pending and view.pending.gate == gate else None


def _holder(cli: CliSandbox, deployment_id: int) -> str:
    with cli.ctx.uow() as uow:
        return str(uow.leases.get(uow.deployments.get(deployment_id).endpoint_id).holder)


@pytest.mark.parametrize("user_reached", [False, True], ids=["closed", "a-user-got-through"])
def test_the_driver_killed_mid_model_gate_is_taken_over_and_judged_on_every_request_it_sent(
        pool: Pool, handed: int, user_reached: bool) -> None:
    cli, dep = pool.cli, handed
    openai = cli.sandbox.stand_ins["openai"]
    wait_until("a replica at the model gate", lambda: _state(cli, dep) == "model_gate", WAIT_SECONDS, poll=0.02)
    openai.hold()  # the evaluation's requests still to come wait at the server, in flight
    wait_until("evaluation requests in flight", lambda: openai.stats().running > 0, WAIT_SECONDS, poll=0.02)
    driver = wait_until("the driver's lease", lambda: holder_pid(cli, dep), WAIT_SECONDS)
    pool.kill(driver)
    openai.release()  # the dead run's requests end as aborts at the server (counted finished, as vLLM does)
    assert openai.wait_for(lambda s: s.running == 0, timeout=WAIT_SECONDS)
    if user_reached:
        # More requests from elsewhere than the evaluation has in flight at once: no request of the dead run
        # explains them.
        body = {"model": openai.behaviour.served_model, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4}
        for _ in range(5):
            assert httpx.post(f"{openai.url}/v1/chat/completions", json=body, timeout=30).status_code == 200

    found = wait_until("the model gate's report from the replica that took over",
                       lambda: _pending_report(cli, dep, "model"), WAIT_SECONDS, poll=0.2)
    [check] = [c for c in found.checks if c.name == "admission.closed"]
    if user_reached:
        assert check.status == "fail" and "requests besides kimi-ops's own" in check.reason, check.reason
    else:
        # Without the dead run's requests counted, its answered ones were reported as users getting through.
        assert check.status != "fail", check.reason
        assert check.status == "pass" or "broke mid-way and may account for them" in check.reason, check.reason
    audit, _ = _record(cli, dep)
    assert [action for _, action in audit].count("gate.checked") == 3  # artifact, infrastructure, model: once each


def test_a_cancel_sent_to_a_replica_that_does_not_drive_starts_the_restore(pool: Pool, handed: int) -> None:
    cli, dep = pool.cli, handed
    operator = cli.sandbox.stand_ins["operator"]
    operator.behaviour = "hang"  # the rollout stays at DeploymentInProgress, well inside its one-hour limit
    wait_until("a replica watching the rollout", lambda: _watching(cli, dep), WAIT_SECONDS, poll=0.1)
    driver = wait_until("the driver's lease", lambda: holder_pid(cli, dep), WAIT_SECONDS)
    other = next(r for r in pool.live() if r.proc.pid != driver)

    sender = SlackSender(SECRET, pool.stub)
    body = sender.slash(DEPLOYER, f"cancel {dep}")
    answer = httpx.post(f"{other.url}/slack/events", content=body.encode(), headers=sender.headers(body), timeout=30)
    assert answer.status_code == 200, answer.text
    wait_until("the cancel", lambda: _state(cli, dep) == "cancelled", WAIT_SECONDS, poll=0.2)
    # The driver hears of it at its lease heartbeat, leaves the watch and drives the restore at once.
    restore = wait_until("the restore to start", lambda: (found := _restore_of(cli, dep)) is not None
                         and found[1] != "requested" and found, WAIT_SECONDS, poll=0.2)
    operator.behaviour = "succeed"  # the restored release rolls out
    wait_until("the restore live", lambda: _state(cli, restore[0]) == "live", WAIT_SECONDS, poll=0.5)
    assert driver in {r.proc.pid for r in pool.live()}  # nobody died: the driver gave way, no takeover was needed


def test_resume_right_after_the_driver_is_killed_says_who_holds_it_and_exits_1(pool: Pool, handed: int) -> None:
    cli, dep = pool.cli, handed
    operator = cli.sandbox.stand_ins["operator"]
    operator.behaviour = "hang"
    wait_until("a replica watching the rollout", lambda: _watching(cli, dep), WAIT_SECONDS, poll=0.1)
    driver = wait_until("the driver's lease", lambda: holder_pid(cli, dep), WAIT_SECONDS)
    holder = _holder(cli, dep)
    pool.kill(driver)
    _, events_at_kill = _record(cli, dep)

    done = run_in_process(["resume"], cli.env, cli.cwd)  # in this process: no interpreter start before it looks
    assert done.returncode == 1, done.stdout + done.stderr
    said = re.search(rf"left deployment #{dep}: it is driven by (\S+) until \d\d:\d\d:\d\d UTC; it lapses in \d+ s",
                     done.stdout)
    assert said and said.group(1) == holder, done.stdout
    # Once the dead one's lease lapses, another replica takes over and re-attaches to the rollout.
    wait_until("another replica watching the rollout", lambda: _watching(cli, dep, after_event=events_at_kill[-1][0]),
               WAIT_SECONDS, poll=0.2)
    assert holder_pid(cli, dep) in {r.proc.pid for r in pool.live()}


def _cancel_on_another(pool: Pool, deployment_id: int) -> None:
    """``/kimi cancel`` signed as Slack signs it, into a replica that does not drive the deployment."""
    driver = wait_until("the driver's lease", lambda: holder_pid(pool.cli, deployment_id), WAIT_SECONDS)
    other = next(r for r in pool.live() if r.proc.pid != driver)
    sender = SlackSender(SECRET, pool.stub)
    body = sender.slash(DEPLOYER, f"cancel {deployment_id}")
    answer = httpx.post(f"{other.url}/slack/events", content=body.encode(), headers=sender.headers(body), timeout=30)
    assert answer.status_code == 200, answer.text


def test_a_cancel_on_another_replica_during_a_drain_reopens_without_waiting_for_the_running_request(
        pool: Pool, handed: int) -> None:
    cli, dep = pool.cli, handed
    openai = cli.sandbox.stand_ins["openai"]
    openai.hold()  # a user's request runs at the model, producing nothing until released: the drain cannot end
    body = {"model": openai.behaviour.served_model, "messages": [{"role": "user", "content": "Write the long report."}],
            "max_tokens": 8, "stream": True}
    user, got = in_background(lambda: httpx.post(f"{openai.url}/v1/chat/completions", json=body, timeout=WAIT_SECONDS * 3))
    assert openai.wait_for(lambda s: s.running == 1)
    applies = len(_applies(cli))
    wait_until("a replica draining", lambda: _state(cli, dep) == "draining", WAIT_SECONDS, poll=0.1)
    scraped = openai.stats().scrapes
    assert openai.wait_for(lambda s: s.scrapes >= scraped + 2, timeout=WAIT_SECONDS)  # it looks at the request

    _cancel_on_another(pool, dep)
    # Without the drain hearing of it, the deployment stays `reopening` for the drain's hour.
    wait_until("users reopened and the deployment cancelled", lambda: _state(cli, dep) == "cancelled", WAIT_SECONDS,
               poll=0.2)
    assert len(_applies(cli)) == applies  # nothing applied
    assert user.is_alive()  # the user's request was never cut off
    openai.release()
    assert joined(user, got).status_code == 200


def _sweeping(pool: Pool, deployment_id: int) -> None:
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


def test_a_cancel_on_another_replica_during_the_traffic_gate_sweep_stops_it_and_the_restore_runs(
        pool: Pool, handed: int) -> None:
    cli, dep = pool.cli, handed
    _sweeping(pool, dep)
    _cancel_on_another(pool, dep)
    wait_until("the cancel", lambda: _state(cli, dep) == "cancelled", WAIT_SECONDS, poll=0.2)
    # Without the sweep hearing of it, the restore waits for the sweep's day.
    restore = wait_until("the restore live", lambda: (found := _restore_of(cli, dep)) is not None
                         and found[1] == "live" and found, WAIT_SECONDS, poll=0.5)
    assert restore
    with cli.ctx.uow() as uow:
        assert "traffic" not in [g.gate for g in uow.gates.for_deployment(dep)]  # the stopped run stored nothing


def test_the_driver_killed_mid_sweep_is_taken_over_and_its_traffic_gate_judged_on_every_request_it_sent(
        pool: Pool, handed: int) -> None:
    cli, dep = pool.cli, handed
    openai = cli.sandbox.stand_ins["openai"]
    _sweeping(pool, dep)
    driver = wait_until("the driver's lease", lambda: holder_pid(cli, dep), WAIT_SECONDS)
    # The others give way to replicas whose sweep ends by itself, so the one that takes over stores a report; the
    # driver's own sweep goes on all day, so it is still sweeping when killed.
    for replica in pool.live():
        if replica.proc.pid != driver:
            end(replica)
    try:
        pool.ensure(3, sweep=QUICK_SWEEP)
        openai.hold()  # the sweep's next request waits at the server, in flight
        wait_until("sweep requests in flight", lambda: openai.stats().running > 0, WAIT_SECONDS, poll=0.02)
        pool.kill(driver)
        openai.release()  # the dead run's requests end as aborts at the server (counted finished, as vLLM does)
        assert openai.wait_for(lambda s: s.running == 0, timeout=WAIT_SECONDS)

        found = wait_until("the traffic gate's report from the replica that took over",
                           lambda: _pending_report(cli, dep, "traffic"), WAIT_SECONDS, poll=0.2)
        assert found.attachments["sweep"]["requests"] > 0, found  # a sweep that ran, not a stopped or errored one
        [check] = [c for c in found.checks if c.name == "admission.closed"]
        # Without the dead run's requests counted, its answered ones were reported as users getting through.
        assert check.status != "fail", check.reason
        assert check.status == "pass" or "broke mid-way and may account for them" in check.reason, check.reason
        audit, _ = _record(cli, dep)
        assert [action for _, action in audit].count("gate.checked") == 4  # the dead run's gate was never checked
    finally:
        for replica in pool.live():
            if replica.sweep is not None:  # the next test's replicas sweep all day again
                end(replica)
