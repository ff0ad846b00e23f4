"""A cancel answered by a process that is not driving the deployment stops the driver's rollout watch.

A real ``kimi-ops gate approve`` process drives a deploy into a rollout the HyperPod operator simulator holds at
``DeploymentInProgress`` (a rollout limit of an hour). ``kimi-ops cancel``, run elsewhere (in this test's process,
as a terminal would run it), marks it cancelled and starts the restore, which it cannot drive: the first process
holds the endpoint's lease. That process hears
of the cancel at its next lease heartbeat, abandons the watch and drives the restore, long before the rollout
limit would have ended the watch. On SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.sandbox.stack import APPROVER_2, DEPLOYER
from bot.services.deployments import get_deployment
from tests.cli_support import CliSandbox, deploy_in_process, run_in_process, start_cli_sandbox, stop_cli_sandbox
from tests.stack.replica_pool import restore_of
from tests.world_support import wait_until

pytestmark = pytest.mark.timeout(500)

# A bound on waiting for another process, not a performance expectation; far below the endpoint's rollout limit
# (max_deploy_seconds, an hour), which is what ended the watch before a cancel could.
WAIT_SECONDS = 120


@pytest.fixture(params=["sqlite", "postgres"])
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CliSandbox]:
    url = request.getfixturevalue("fresh_pg_url") if request.param == "postgres" else None
    sandbox = start_cli_sandbox(tmp_path, database_url=url)
    sandbox.env.update(KIMI_LEASE_SECONDS="10", KIMI_LEASE_HEARTBEAT_SECONDS="1")
    try:
        yield sandbox
    finally:
        sandbox.sandbox.stand_ins["operator"].behaviour = "succeed"
        stop_cli_sandbox(sandbox)


def _watching(cli: CliSandbox, deployment_id: int) -> bool:
    with cli.ctx.uow() as uow:
        return any(e.kind == "rollout.progress" and e.payload.get("state") == "DeploymentInProgress"
                   for e in uow.events.for_deployment(deployment_id))


def test_a_cancel_on_another_process_stops_a_stuck_rollout_watch_and_the_restore_starts(cli: CliSandbox) -> None:
    first, second = (r.name for r in cli.sandbox.releases)
    deploy_in_process(cli, first)  # live: what the restore gives users back
    dep = deploy_in_process(cli, second, until="infrastructure_gate").id
    operator = cli.sandbox.stand_ins["operator"]
    operator.behaviour = "hang"  # the rollout stays at DeploymentInProgress, well inside its one-hour limit

    driving = cli.popen("gate", "approve", str(dep), "infrastructure", "--as", APPROVER_2)
    try:
        wait_until("the driver's rollout watch", lambda: driving.poll() is None and _watching(cli, dep),
                   WAIT_SECONDS, poll=0.1)
        cancelled = run_in_process(["cancel", str(dep), "--as", DEPLOYER], cli.env, cli.cwd)
        assert cancelled.returncode == 0, cli.explain(cancelled)
        assert get_deployment(cli.ctx, dep).state == "cancelled"

        # The restore is driven by the process that was watching: it passes its requested state at once.
        restore = wait_until("the restore to start", lambda: (found := restore_of(cli, dep)) is not None
                             and found[1] not in ("requested",) and found, WAIT_SECONDS, poll=0.2)
        assert driving.poll() is None, "the driver exited instead of driving the restore"
        operator.behaviour = "succeed"  # the restored release rolls out
        wait_until("the restore to go live", lambda: get_deployment(cli.ctx, restore[0]).state == "live",
                   WAIT_SECONDS * 2, poll=0.2)
        driving.communicate(timeout=WAIT_SECONDS)  # the approve it was answering ends with the restore
    finally:
        if driving.poll() is None:
            driving.kill()
            driving.communicate()
    with cli.ctx.uow() as uow:
        applied_by = [a.actor for a in uow.audit.list(subject=f"deployment:{restore[0]}", limit=100)
                      if a.action == "deployment.applying"]
    assert applied_by == ["kimi-ops"]
