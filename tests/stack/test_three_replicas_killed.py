"""Three replicas (``tests/stack/replica_pool.py``): the driver killed with -9 mid model gate is taken over, and a
``kimi-ops resume`` right after the kill leaves the deployment to the lease it finds (issue 35).

* kill -9 of the driving replica while its model gate's evaluation has requests in flight: another replica takes
  over and runs the gate again, and the closed-door check counts the dead run's requests: no user reached the
  candidate, so it does not fail; requests from elsewhere that did reach it fail it;
* ``kimi-ops resume`` right after the driver's kill: it names who holds the deployment until when, and exits 1.
"""

from __future__ import annotations

import re

import httpx
import pytest

from tests.cli_support import run_in_process
from tests.services.test_crash_recovery import _record, _watching
from tests.stack.replica_pool import WAIT_SECONDS, Pool, holder_name, pending_report, state_of
from tests.stack.test_replica_takeover import holder_pid
from tests.world_support import wait_until

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("user_reached", [False, True], ids=["closed", "a-user-got-through"])
def test_the_driver_killed_mid_model_gate_is_taken_over_and_judged_on_every_request_it_sent(
        replicas: Pool, handed: int, user_reached: bool) -> None:
    cli, dep = replicas.cli, handed
    openai = cli.sandbox.stand_ins["openai"]
    wait_until("a replica at the model gate", lambda: state_of(cli, dep) == "model_gate", WAIT_SECONDS, poll=0.02)
    openai.hold()  # the evaluation's requests still to come wait at the server, in flight
    wait_until("evaluation requests in flight", lambda: openai.stats().running > 0, WAIT_SECONDS, poll=0.02)
    driver = wait_until("the driver's lease", lambda: holder_pid(cli, dep), WAIT_SECONDS)
    replicas.kill(driver)
    openai.release()  # the dead run's requests end as aborts at the server (counted finished, as vLLM does)
    replicas.start(1)  # the killed pod's replacement, as Kubernetes starts one: it joins while the others take over
    assert openai.wait_for(lambda s: s.running == 0, timeout=WAIT_SECONDS)
    if user_reached:
        # More requests from elsewhere than the evaluation has in flight at once: no request of the dead run
        # explains them.
        body = {"model": openai.behaviour.served_model, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4}
        for _ in range(5):
            assert httpx.post(f"{openai.url}/v1/chat/completions", json=body, timeout=30).status_code == 200

    found = wait_until("the model gate's report from the replica that took over",
                       lambda: pending_report(cli, dep, "model"), WAIT_SECONDS, poll=0.2)
    [check] = [c for c in found.checks if c.name == "admission.closed"]
    if user_reached:
        assert check.status == "fail" and "requests besides kimi-ops's own" in check.reason, check.reason
    else:
        # Without the dead run's requests counted, its answered ones were reported as users getting through.
        assert check.status != "fail", check.reason
        assert check.status == "pass" or "broke mid-way and may account for them" in check.reason, check.reason
    audit, _ = _record(cli, dep)
    assert [action for _, action in audit].count("gate.checked") == 3  # artifact, infrastructure, model: once each


def test_resume_right_after_the_driver_is_killed_says_who_holds_it_and_exits_1(replicas: Pool, handed: int) -> None:
    cli, dep = replicas.cli, handed
    operator = cli.sandbox.stand_ins["operator"]
    operator.behaviour = "hang"
    wait_until("a replica watching the rollout", lambda: _watching(cli, dep), WAIT_SECONDS, poll=0.1)
    driver = wait_until("the driver's lease", lambda: holder_pid(cli, dep), WAIT_SECONDS)
    holder = holder_name(cli, dep)
    replicas.kill(driver)
    _, events_at_kill = _record(cli, dep)

    done = run_in_process(["resume"], cli.env, cli.cwd)  # in this process: no interpreter start before it looks
    assert done.returncode == 1, done.stdout + done.stderr
    said = re.search(rf"left deployment #{dep}: it is driven by (\S+) until \d\d:\d\d:\d\d UTC; it lapses in \d+ s",
                     done.stdout)
    assert said and said.group(1) == holder, done.stdout
    # Once the dead one's lease lapses, another replica takes over and re-attaches to the rollout.
    wait_until("another replica watching the rollout", lambda: _watching(cli, dep, after_event=events_at_kill[-1][0]),
               WAIT_SECONDS, poll=0.2)
    assert holder_pid(cli, dep) in {r.proc.pid for r in replicas.live()}
