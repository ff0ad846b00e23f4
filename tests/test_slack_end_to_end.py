"""End to end through Slack only: deploy → four approvals by two people → live → rollback, as the channel sees it."""

from __future__ import annotations

import pytest

from bot.domain.messages import APPROVE
from bot.services import ports
from bot.services.releases import register_release
from tests.slack_support import CHANNEL, blocks_text, has_buttons, start_bench, stop_bench
from tests.workflow_support import (
    ROLES,
    FakeCluster,
    FakeEndpoint,
    FakeReservations,
    FakeVerifier,
    endpoint_config,
    release_data,
)

GATES = ("artifact", "infrastructure", "model", "traffic")


@pytest.fixture()
def bench(make_ctx):
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES)
    cluster = FakeCluster()
    ctx.adapters.update({
        ports.ARTIFACTS: FakeVerifier(), ports.CLUSTER: cluster, ports.ENDPOINT: FakeEndpoint(),
        ports.RESERVATIONS: FakeReservations(),
    })
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    register_release(ctx, release_data("rel-b", EXTRA="1"), "U0DEPLOYER")
    # U0APPROVER2 is an approver only through the S0APPROVERS user group.
    b = start_bench(ctx, groups={"S0APPROVERS": ["U0APPROVER2"]})
    b.cluster = cluster  # type: ignore[attr-defined]
    yield b
    stop_bench(b)


def root_of(bench, deployment_id: int):
    return bench.stub.wait_for(lambda s: next((m for m in s.messages if m.thread_ts is None and m.ephemeral_to is None
                                               and f"Deployment #{deployment_id}:" in m.text), None))


def wait_state(bench, deployment_id: int, words: str):
    return bench.stub.wait_for(lambda s: (root := root_of(bench, deployment_id)) and words in root.text and root)


def approve_all(bench, deployment_id: int, gates: tuple[str, ...]) -> None:
    approvers = ("U0APPROVER1", "U0APPROVER2")
    for i, gate in enumerate(gates):
        message = bench.gate_message(gate, deployment_id)
        assert has_buttons(message)
        who = approvers[i % 2]
        assert bench.click(who, message, APPROVE).status_code == 200
        bench.stub.wait_for(lambda s: f"Approved by <@{who}>" in blocks_text(message.blocks) and not has_buttons(message))


def test_deploy_four_approvals_live_then_rollback_all_through_slack(bench) -> None:
    bench.slash("U0DEPLOYER", "deploy rel-a to kimi-prod")
    approve_all(bench, 1, GATES)
    root = wait_state(bench, 1, "— live")
    thread = bench.stub.thread(CHANNEL, root.ts)
    texts = "\n".join(m.text + blocks_text(m.blocks) for m in thread)
    assert "→ *applying*" in texts and "DeploymentComplete" in texts and "readiness completion" in texts
    assert any(m.text.startswith("→ *live*") for m in thread)

    bench.slash("U0DEPLOYER", "deploy rel-b")
    approve_all(bench, 2, GATES)
    wait_state(bench, 2, "— live")
    wait_state(bench, 1, "— superseded")  # the first thread's title no longer claims it is live

    bench.slash("U0DEPLOYER", "rollback kimi-prod")
    assert "Rollback #3 of *kimi-prod* to *rel-a*" in bench.replies_to("requester", 3)[-1].text
    rollback_gate = bench.gate_message("artifact", 3)
    assert "weights.objects" in blocks_text(rollback_gate.blocks) and "manifest.restore" in blocks_text(rollback_gate.blocks)
    bench.click("U0APPROVER2", rollback_gate, APPROVE)
    rolled = wait_state(bench, 3, "— live")
    assert "rollback of *rel-a*" in rolled.text
    assert bench.cluster.admission == [False, True]  # closed and drained before the single node moved, then reopened
    assert bench.cluster.applied[-1] == bench.cluster.applied[0]  # the exact manifest rel-a went live with

    bench.slash("U0APPROVER1", "history kimi-prod")
    history = blocks_text(bench.replies_to("requester", 4)[-1].blocks)
    assert "*#3* rollback of *rel-a* — live" in history and "*#2* deploy of *rel-b* — superseded" in history
    assert "infrastructure <@U0APPROVER2>" in history
