"""Ownership of a rollout across real ``kimi-ops serve`` replicas on one PostgreSQL database.

One sandbox, one Slack stub and one pool of replicas serve the whole module (a
replica takes seconds to start); each test drives a deployment of its own and
ends it. A person's approval is recorded in this process and nobody drives it,
so the replicas' periodic takeover picks it up: one replica claims the
endpoint's lease and watches the rollout, which the HyperPod operator simulator
holds at ``DeploymentInProgress`` while the test acts.

* SIGTERM and restart of the replica that does not drive: its start-up leaves
  the deployment alone, so each gate runs once, and each event is one Slack
  message (every post carries its key in its metadata), whichever replica
  delivered it;
* kill -9 of the driving replica: another takes over within the lease bound,
  re-attaches to the rollout watch and applies nothing again; still one
  message per event, though the dead replica may have died mid-post.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.sandbox.slack_stub import SlackStub
from bot.sandbox.stack import ADMIN, APPROVER_2
from bot.services.access import Identity
from bot.services.deployments import cancel, decide_gate, get_deployment, history
from tests.cli_support import CliSandbox, deploy_in_process, start_cli_sandbox, stop_cli_sandbox
from tests.services.test_crash_recovery import _applies, _record, _watching
from tests.slack_support import blocks_text, has_buttons
from tests.world_support import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(600)]

CLI = [sys.executable, "-c", "from bot.cli.main import main; main()"]
LEASE_SECONDS, HEARTBEAT_SECONDS, TAKEOVER_SECONDS = 4.0, 1.0, 1.0
BOUND = LEASE_SECONDS + TAKEOVER_SECONDS  # how long a dead driver's deployment may stay undriven
SLACK = 5.0  # scheduling on a shared CI machine: the thread wakes, the watch connects
# The waits below poll a few times a second, not wait_until's 50: each look reads the deployment's events (a
# settled look also its view and lease), and none of the states waited on here is transient.
GATES = ("artifact", "infrastructure", "model")


@dataclass
class Replica:
    name: str
    proc: subprocess.Popen[str]
    log: Path
    url: str = ""


@dataclass
class Pool:
    """The module's replicas: started side by side, stopped by the tests or at the end of the module."""

    cli: CliSandbox
    stub: SlackStub
    replicas: list[Replica] = field(default_factory=list)

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.proc.poll() is None]

    def start(self, count: int) -> list[Replica]:
        launched = [self._launch(f"r{len(self.replicas)}") for _ in range(count)]
        for replica in launched:
            self._serving(replica)
        return launched

    def ensure(self, count: int) -> None:
        if len(self.live()) < count:
            self.start(count - len(self.live()))

    def _launch(self, name: str) -> Replica:
        home = self.cli.cwd / name
        home.mkdir()
        env = {**self.cli.env, "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "replica-takeover-secret",
               "KIMI_SLACK_API_URL": self.stub.api_url, "KIMI_LEASE_SECONDS": str(LEASE_SECONDS),
               "KIMI_LEASE_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
               "KIMI_LEASE_TAKEOVER_SECONDS": str(TAKEOVER_SECONDS)}
        log = home / "stderr.log"
        with log.open("w") as err:  # a file, not a pipe: nobody reads the log while the replica runs
            proc = subprocess.Popen([*CLI, "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs"],
                                    stdout=subprocess.PIPE, stderr=err, text=True, cwd=home, env=env)
        replica = Replica(name, proc, log)
        self.replicas.append(replica)
        return replica

    def _serving(self, replica: Replica) -> None:
        line = replica.proc.stdout.readline()  # type: ignore[union-attr]
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        if not found:
            stop(replica, signal.SIGKILL)
            raise AssertionError(line + replica.log.read_text(errors="replace")[-4000:])
        replica.url = found.group(1)


def stop(replica: Replica, sig: int = signal.SIGTERM) -> None:
    if replica.proc.poll() is None:
        replica.proc.send_signal(sig)
    try:
        replica.proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        replica.proc.kill()
        replica.proc.communicate()


@pytest.fixture(scope="module")
def pool(module_pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    with pytest.MonkeyPatch.context() as env:
        for name in list(os.environ):  # as every test starts: nothing of the machine's Slack, AWS or kimi-ops settings
            if name.startswith(("SLACK_", "AWS_", "KIMI_")):
                env.delenv(name)
        cli = start_cli_sandbox(tmp_path_factory.mktemp("replicas"), database_url=module_pg_url)
        try:
            with SlackStub() as stub:
                replicas = Pool(cli, stub)
                try:
                    replicas.start(2)
                    yield replicas
                finally:
                    for replica in replicas.replicas:
                        stop(replica)
        finally:
            stop_cli_sandbox(cli)


@dataclass
class Rollout:
    deployment: int
    driver: int  # the pid of the replica holding the endpoint's lease
    applied_before: int  # the cluster's applies of the endpoint object before this deployment


@pytest.fixture()
def rollout(pool: Pool) -> Iterator[Rollout]:
    """A deploy approved here up to its rollout and left to the replicas; a replica claims it and watches the rollout."""
    cli = pool.cli
    operator = cli.sandbox.stand_ins["operator"]
    operator.behaviour = "hang"  # the operator holds the rollout at DeploymentInProgress
    pool.ensure(2)
    # Each test deploys the other release than the one before: a new manifest, so a new rollout to hold.
    release = cli.sandbox.releases[len(history(cli.ctx)) % len(cli.sandbox.releases)].name
    applied_before = len(_applies(cli))
    dep = deploy_in_process(cli, release, until="infrastructure_gate")
    decide_gate(cli.ctx, dep.id, "infrastructure", "approved", Identity(APPROVER_2),
                seen_report_hash=dep.pending.report_hash, seen_release_hash=dep.pending.release_hash)
    try:
        wait_until("a replica watching the rollout", lambda: _watching(cli, dep.id), poll=0.1)
        driver = wait_until("the driver's lease", lambda: holder_pid(cli, dep.id), poll=0.1)
        yield Rollout(dep.id, driver, applied_before)
    finally:
        operator.behaviour = "succeed"
        if get_deployment(cli.ctx, dep.id).in_flight:  # free the endpoint for the next test
            cancel(cli.ctx, dep.id, Identity(ADMIN), force=True)


def holds_for(what: str, look: Callable[[], Any], right: Callable[[Any], bool], seconds: float) -> None:
    """What ``look`` sees stays ``right`` for ``seconds`` (what a wrong takeover would have changed by then)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen = look()
        assert right(seen), f"{what}: {seen}"
        time.sleep(0.1)


def holder_pid(cli: CliSandbox, deployment_id: int) -> int | None:
    """The pid of the replica whose lease on the deployment's endpoint is alive.

    The holder names its process: the replica's worker process (``kimi-ops serve`` drives deployments there),
    whose parent is the replica.
    """
    with cli.ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        lease = uow.leases.get(dep.endpoint_id)
        if lease is None or lease.expires_at <= dt.datetime.now(dt.UTC) or lease.deployment_id != deployment_id:
            return None
        worker = int(lease.holder.rsplit("-", 2)[1])
    try:
        return int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None  # gone: it holds nothing any more


def repeated_progress(cli: CliSandbox, deployment_id: int) -> list[str]:
    """Progress reported twice: a second watch re-attached to the rollout (one watch reports each change once)."""
    _, events = _record(cli, deployment_id)
    seen = Counter(str(payload.get("message")) for _, kind, payload in events if kind == "rollout.progress")
    return sorted(message for message, count in seen.items() if count > 1)


def settled_at_model_gate(cli: CliSandbox, deployment_id: int) -> bool:
    """The model gate's report waits for a person, nobody drives, and every event of the deployment went to Slack."""
    if get_deployment(cli.ctx, deployment_id).state != "model_gate" or holder_pid(cli, deployment_id) is not None:
        return False
    with cli.ctx.uow() as uow:
        reported = any(g.gate == "model" for g in uow.gates.for_deployment(deployment_id))
        return reported and all(e.delivered_at is not None for e in uow.events.for_deployment(deployment_id))


def assert_each_gate_ran_once(cli: CliSandbox, deployment_id: int) -> None:
    with cli.ctx.uow() as uow:
        runs = Counter(g.gate for g in uow.gates.for_deployment(deployment_id))
    assert runs == Counter(GATES), runs
    audit, _ = _record(cli, deployment_id)
    assert [action for _, action in audit].count("gate.checked") == len(GATES)


def assert_one_message_per_event(pool: Pool, deployment_id: int) -> None:
    """Every Slack post of the deployment, from any replica, counted by the key it carries, against its events."""
    cli, stub = pool.cli, pool.stub
    with cli.ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        channel, root = dep.slack_channel, dep.slack_thread_ts
        events = [(e.id, e.kind, e.payload) for e in uow.events.for_deployment(deployment_id)]
    wanted: set[str] = set()
    plots = 0
    for event_id, kind, payload in events:
        if kind == "deployment.requested":
            wanted.add(f"deployment:{deployment_id}")  # the thread's root
        elif kind == "gate.waiting":
            wanted.add(f"gate:{payload['gate_result_id']}")  # the gate message
        elif kind in ("gate.plot", "ramp.plot"):
            plots += 1  # an upload into the thread
        elif kind in ("deployment.state", "rollout.progress", "admission.changed"):
            wanted.add(f"progress:{deployment_id}")  # the one progress message, posted once and edited in place
        elif kind == "ramp.split":
            wanted.add(f"ramp:{deployment_id}")  # the ramp's one message, edited in place by every later split
        elif kind not in ("gate.decided", "limits.accepted"):  # those edit the gate message in place
            wanted.add(f"event:{event_id}")  # one reply in the thread
    keys = [(c.params.get("metadata") or {}).get("event_payload", {}).get("key")
            for c in stub.calls_to("chat.postMessage")
            if c.params.get("channel") == channel and (c.params.get("thread_ts") == root or c.params.get("thread_ts") is None)]
    posted = Counter(k for k in keys if k == f"deployment:{deployment_id}" or k in wanted or
                     (k or "").split("/")[0] in wanted)
    assert {k: n for k, n in posted.items() if n > 1} == {}, "posted more than once"
    assert {k.split("/")[0] for k in posted} == wanted
    uploads = [c for c in stub.calls_to("files.completeUploadExternal") if c.params.get("thread_ts") == root]
    assert len(uploads) == plots
    # As a person reads the thread: one message per gate, edited in place once decided.
    thread = stub.thread(channel, root)
    for gate in GATES:
        shown = [m for m in thread if f"{gate.capitalize()} gate · deployment #{deployment_id}" in blocks_text(m.blocks)]
        assert len(shown) == 1, (gate, [m.ts for m in shown])
        assert has_buttons(shown[0]) == (gate == "model")


def test_a_replica_restarted_mid_rollout_leaves_it_to_its_driver(pool: Pool, rollout: Rollout) -> None:
    cli, dep = pool.cli, rollout.deployment
    other = next(r for r in pool.live() if r.proc.pid != rollout.driver)

    stop(other)  # a rolling update: SIGTERM, then the new pod starts and resumes what it may
    assert other.proc.returncode == 0
    pool.start(1)
    # Its start-up resume and a few takeover rounds run: the driver keeps the lease, and no second watch
    # re-attaches (it would report again what the driver's watch already reported).
    holds_for("the driver keeps the rollout to itself", lambda: (holder_pid(cli, dep), repeated_progress(cli, dep)),
              lambda seen: seen == (rollout.driver, []), LEASE_SECONDS + TAKEOVER_SECONDS)

    cli.sandbox.stand_ins["operator"].behaviour = "succeed"
    wait_until("the model gate's report posted and nothing left to deliver", lambda: settled_at_model_gate(cli, dep),
               poll=0.2)
    assert repeated_progress(cli, dep) == []  # one watch followed the rollout to its end
    assert_each_gate_ran_once(cli, dep)
    assert_one_message_per_event(pool, dep)


def test_the_driving_replica_killed_mid_rollout_is_taken_over_by_a_live_replica(pool: Pool, rollout: Rollout) -> None:
    cli, dep = pool.cli, rollout.deployment
    dead = next(r for r in pool.live() if r.proc.pid == rollout.driver)
    alive = {r.proc.pid for r in pool.live()} - {dead.proc.pid}
    assert len(_applies(cli)) == rollout.applied_before + 1

    dead.proc.send_signal(signal.SIGKILL)
    dead.proc.communicate()
    # Read once the driver is dead: an event it wrote between a reading and the kill would look like a takeover.
    _, events_at_kill = _record(cli, dep)
    # Waited on as a state, not timed: the lease and the takeover round (BOUND) are settings; how soon a busy machine
    # lets a replica act on them is not this test's to assert.
    wait_until("another replica re-attached to the rollout watch",
               lambda: _watching(cli, dep, after_event=events_at_kill[-1][0]), BOUND + SLACK + 30, poll=0.1)
    assert holder_pid(cli, dep) in alive

    cli.sandbox.stand_ins["operator"].behaviour = "succeed"
    wait_until("the model gate's report posted and nothing left to deliver", lambda: settled_at_model_gate(cli, dep),
               poll=0.2)
    assert len(_applies(cli)) == rollout.applied_before + 1  # re-attached, never re-applied
    audit, _ = _record(cli, dep)
    actions = [action for _, action in audit]
    for once in ("manifest.rendered", "deployment.applying", "deployment.rolling_out", "deployment.readiness",
                 "deployment.model_gate"):
        assert actions.count(once) == 1, (once, actions)
    assert_each_gate_ran_once(cli, dep)
    assert_one_message_per_event(pool, dep)
