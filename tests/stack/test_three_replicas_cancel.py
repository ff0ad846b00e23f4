"""Three replicas (``tests/stack/replica_pool.py``): ``/kimi cancel`` sent to a replica that does not drive the
deployment stops whatever step its driver runs, never waiting for the step to end by itself (issue 35).

* signed as Slack signs it, during a stuck rollout: the driver hears of it at its lease heartbeat and starts the
  restore, whatever the rollout limit;
* while the driver drains (a request held at the model, an hour's drain deadline) or runs its traffic gate's sweep
  (the replicas' plan has a day's budget): the step ends at once and the deployment is cancelled (reopened before
  the apply, restored after it).
"""

from __future__ import annotations

import httpx
import pytest

from bot.sandbox.slack_stub import SlackSender
from bot.sandbox.stack import DEPLOYER
from tests.services.test_crash_recovery import _applies, _watching
from tests.stack.replica_pool import (
    SECRET,
    WAIT_SECONDS,
    Pool,
    cancel_on_another,
    restore_of,
    state_of,
    sweeping,
)
from tests.stack.test_replica_takeover import holder_pid
from tests.world_support import in_background, joined, wait_until

pytestmark = pytest.mark.timeout(600)


def test_a_cancel_sent_to_a_replica_that_does_not_drive_starts_the_restore(replicas: Pool, handed: int) -> None:
    cli, dep = replicas.cli, handed
    operator = cli.sandbox.stand_ins["operator"]
    operator.behaviour = "hang"  # the rollout stays at DeploymentInProgress, well inside its one-hour limit
    wait_until("a replica watching the rollout", lambda: _watching(cli, dep), WAIT_SECONDS, poll=0.1)
    driver = wait_until("the driver's lease", lambda: holder_pid(cli, dep), WAIT_SECONDS)
    other = next(r for r in replicas.live() if r.proc.pid != driver)

    sender = SlackSender(SECRET, replicas.stub)
    body = sender.slash(DEPLOYER, f"cancel {dep}")
    answer = httpx.post(f"{other.url}/slack/events", content=body.encode(), headers=sender.headers(body), timeout=30)
    assert answer.status_code == 200, answer.text
    wait_until("the cancel", lambda: state_of(cli, dep) == "cancelled", WAIT_SECONDS, poll=0.2)
    # The driver hears of it at its lease heartbeat, leaves the watch and drives the restore at once.
    restore = wait_until("the restore to start", lambda: (found := restore_of(cli, dep)) is not None
                         and found[1] != "requested" and found, WAIT_SECONDS, poll=0.2)
    operator.behaviour = "succeed"  # the restored release rolls out
    wait_until("the restore live", lambda: state_of(cli, restore[0]) == "live", WAIT_SECONDS, poll=0.5)
    assert driver in {r.proc.pid for r in replicas.live()}  # nobody died: the driver gave way, no takeover was needed


def test_a_cancel_on_another_replica_during_a_drain_reopens_without_waiting_for_the_running_request(
        replicas: Pool, handed: int) -> None:
    cli, dep = replicas.cli, handed
    openai = cli.sandbox.stand_ins["openai"]
    openai.hold()  # a user's request runs at the model, producing nothing until released: the drain cannot end
    body = {"model": openai.behaviour.served_model, "messages": [{"role": "user", "content": "Write the long report."}],
            "max_tokens": 8, "stream": True}
    user, got = in_background(lambda: httpx.post(f"{openai.url}/v1/chat/completions", json=body, timeout=WAIT_SECONDS * 3))
    assert openai.wait_for(lambda s: s.running == 1)
    applies = len(_applies(cli))
    wait_until("a replica draining", lambda: state_of(cli, dep) == "draining", WAIT_SECONDS, poll=0.1)
    scraped = openai.stats().scrapes
    assert openai.wait_for(lambda s: s.scrapes >= scraped + 2, timeout=WAIT_SECONDS)  # it looks at the request

    cancel_on_another(replicas, dep)
    # Without the drain hearing of it, the deployment stays `reopening` for the drain's hour.
    wait_until("users reopened and the deployment cancelled", lambda: state_of(cli, dep) == "cancelled", WAIT_SECONDS,
               poll=0.2)
    assert len(_applies(cli)) == applies  # nothing applied
    assert user.is_alive()  # the user's request was never cut off
    openai.release()
    assert joined(user, got).status_code == 200


def test_a_cancel_on_another_replica_during_the_traffic_gate_sweep_stops_it_and_the_restore_runs(
        replicas: Pool, handed: int) -> None:
    cli, dep = replicas.cli, handed
    sweeping(replicas, dep)
    cancel_on_another(replicas, dep)
    wait_until("the cancel", lambda: state_of(cli, dep) == "cancelled", WAIT_SECONDS, poll=0.2)
    # Without the sweep hearing of it, the restore waits for the sweep's day.
    restore = wait_until("the restore live", lambda: (found := restore_of(cli, dep)) is not None
                         and found[1] == "live" and found, WAIT_SECONDS, poll=0.5)
    assert restore
    with cli.ctx.uow() as uow:
        assert "traffic" not in [g.gate for g in uow.gates.for_deployment(dep)]  # the stopped run stored nothing
