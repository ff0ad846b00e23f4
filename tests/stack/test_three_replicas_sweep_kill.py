"""Three replicas (``tests/stack/replica_pool.py``): the driver killed with -9 mid traffic gate sweep (issue 35).

The driver's sweep has a request in flight when it dies; a replica with a sweep that ends takes over and sweeps
again; its closed-door check counts the dead run's requests and does not fail, and the dead run's gate is never
checked.

The deploy is handed to one replica, whose sweep runs all day, so it is the driver and still sweeping when killed;
two replicas whose sweep ends by itself join once its sweep runs (the lease keeps it theirs to take over only), so
the one that takes over stores a report. (Three replicas started with the long sweep, two of them then stopped
for two with the short one, cost two replica starts and stops more for the same scene.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cli_support import QUICK_SWEEP
from tests.services.test_crash_recovery import _record
from tests.stack.replica_pool import WAIT_SECONDS, Pool, end, hand_over, pending_report, serve_pool, sweeping
from tests.stack.test_replica_takeover import holder_pid
from tests.world_support import wait_until

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def replicas(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    yield from serve_pool(request, tmp_path_factory, count=1)


@pytest.fixture()
def handed(replicas: Pool) -> Iterator[int]:
    yield from hand_over(replicas, count=1)


def test_the_driver_killed_mid_sweep_is_taken_over_and_its_traffic_gate_judged_on_every_request_it_sent(
        replicas: Pool, handed: int) -> None:
    cli, dep = replicas.cli, handed
    openai = cli.sandbox.stand_ins["openai"]
    sweeping(replicas, dep)
    driver = wait_until("the driver's lease", lambda: holder_pid(cli, dep), WAIT_SECONDS)
    assert [r.proc.pid for r in replicas.live()] == [driver]
    try:
        replicas.ensure(3, sweep=QUICK_SWEEP)  # the two that may take over: their sweep ends by itself
        openai.hold()  # the sweep's next request waits at the server, in flight
        wait_until("sweep requests in flight", lambda: openai.stats().running > 0, WAIT_SECONDS, poll=0.02)
        replicas.kill(driver)
        openai.release()  # the dead run's requests end as aborts at the server (counted finished, as vLLM does)
        assert openai.wait_for(lambda s: s.running == 0, timeout=WAIT_SECONDS)

        found = wait_until("the traffic gate's report from the replica that took over",
                           lambda: pending_report(cli, dep, "traffic"), WAIT_SECONDS, poll=0.2)
        assert found.attachments["sweep"]["requests"] > 0, found  # a sweep that ran, not a stopped or errored one
        [check] = [c for c in found.checks if c.name == "admission.closed"]
        # Without the dead run's requests counted, its answered ones were reported as users getting through.
        assert check.status != "fail", check.reason
        assert check.status == "pass" or "broke mid-way and may account for them" in check.reason, check.reason
        audit, _ = _record(cli, dep)
        assert [action for _, action in audit].count("gate.checked") == 4  # the dead run's gate was never checked
    finally:
        end(*(replica for replica in replicas.live() if replica.sweep is not None))  # the pool's sweep all day
