"""Accepting limits in Slack starts the work that applies them at once, as ``/kimi rollback`` starts its own.

A signed click on the traffic gate's "Accept proposed limits" goes through the real Bolt app served over HTTP and
the Slack Web API stub. The cluster, model and artifact ports are the workflow doubles: what the procedure does is
tested in ``tests/services/test_limits_procedure.py``; this file is about who drives it. Every replica's takeover
round is set far beyond the test's wait, so a restore that ends live was driven by the click.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bot.services.deployments import get_deployment, history
from bot.services.releases import register_release
from bot.views.actions import ACCEPT_LIMITS, GateTicket
from tests.services.test_limits_procedure import propose_limits
from tests.services.test_workflow import deploy_to_live
from tests.slack_support import CHANNEL, SlackBench, start_bench
from tests.workflow_support import ADMIN, ROLES, FakeCluster, endpoint_config, fake_ports, release_data
from tests.world_support import wait_until


@pytest.fixture()
def bench(make_ctx: Any) -> Iterator[SlackBench]:
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES, ports=fake_ports(),
                   lease_takeover_seconds=300)
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    with start_bench(ctx, readiness_pause=0) as b:
        yield b


def test_accepting_limits_on_a_live_single_node_drives_their_restore_without_a_takeover_round(bench: SlackBench) -> None:
    ctx = bench.app.ctx
    live = deploy_to_live(ctx, bench.app.root.engine)
    cluster: FakeCluster = ctx.ports.cluster
    admission, applied = len(cluster.admission), len(cluster.applied)
    report_hash = propose_limits(ctx, live.id, 5, 10)
    ticket = GateTicket(live.id, "traffic", report_hash, "")
    message = bench.gate_message("traffic", live.id)

    bench.post(bench.sender.click(ADMIN.user_id, message, ACCEPT_LIMITS, ticket.encode()))
    said = bench.stub.wait_for(lambda s: next((m for m in s.seen_by(ADMIN.user_id) if "You accepted" in m.text), None))
    assert "applies them to the live release: close → drain → apply → readiness → evaluation → reopen" in said.text

    def restore() -> Any:
        found = [v for v in history(ctx, "kimi-prod") if v.kind == "restore" and v.id > live.id]
        return found[-1] if found and found[-1].state == "live" else None

    done = wait_until("the restore carrying the limits to go live", restore)
    assert f"restore #{done.id}" in said.text and done.release == live.release
    # Users were closed out for the apply and let back in after it: the procedure, driven by the click.
    assert cluster.admission[admission:] == [False, True] and len(cluster.applied) == applied + 1
    assert get_deployment(ctx, live.id).state == "superseded"
