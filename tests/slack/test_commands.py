"""Sub-command parsing (pure, answered in the ack), and the read commands a person uses, over HTTP."""

from __future__ import annotations

import threading

import pytest

from bot.services.releases import register_release
from bot.views.actions import APPROVE
from commands import cancel, deploy, history, release, rollback, status
from commands.base import Usage
from commands.registry import COMMANDS, split
from tests.slack_support import (
    CHANNEL,
    blocks_text,
    has_buttons,
    start_bench,
    stop_bench,
)
from tests.workflow_support import (
    ROLES,
    FakeCluster,
    FakeVerifier,
    endpoint_config,
    fake_ports,
    release_data,
)

# The Slack edge (or the CLI's wording) is what is tested here, not the store: SQLite only (tests/conftest.py).
pytestmark = pytest.mark.sqlite_only


@pytest.mark.parametrize("text, module, args", [
    ("", "help", []),
    ("deploy rel-a", "deploy", ["rel-a"]),
    ("DEPLOY rel-a to kimi-prod", "deploy", ["rel-a", "to", "kimi-prod"]),
    ("history kimi-prod 5", "history", ["kimi-prod", "5"]),
    ("rollback to rel-a", "rollback", ["to", "rel-a"]),
    ("cancel #12 force", "cancel", ["#12", "force"]),
])
def test_well_formed_input_reaches_its_module(text, module, args) -> None:
    found, found_args = split(text)
    assert module == found.NAME and found_args == args


@pytest.mark.parametrize("text, usage", [
    ("deploy", deploy.USAGE), ("deploy rel-a into x", deploy.USAGE), ("status a b", status.USAGE),
    ("history a 0", history.USAGE), ("release show", release.USAGE), ("rollback a b c d", rollback.USAGE),
    ("cancel twelve", cancel.USAGE), ("cancel 3 now", cancel.USAGE),
])
def test_malformed_input_is_refused_with_that_commands_usage(text, usage) -> None:
    with pytest.raises(Usage) as refused:
        split(text)
    assert refused.value.usage == usage and str(refused.value).endswith(f"Usage: `{usage}`")
    assert refused.value.problem  # says which part is wrong, not only the usage line


def test_parsed_arguments() -> None:
    assert history.parse(["7"]) == history.Args(None, 7) and history.parse(["kimi-prod"]) == history.Args("kimi-prod", 10)
    assert rollback.parse(["kimi-prod", "to", "rel-a"]) == rollback.Args("kimi-prod", "rel-a")
    assert cancel.parse(["#4"]) == cancel.Args(4, False)
    assert all(m.USAGE.startswith("/kimi ") and m.HELP for m in COMMANDS)


@pytest.fixture()
def bench(make_ctx):
    cluster = FakeCluster(block=threading.Event())
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES, ports=fake_ports(cluster=cluster))
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    b = start_bench(ctx)
    b.cluster = cluster  # type: ignore[attr-defined]
    b.ctx = ctx  # type: ignore[attr-defined]
    yield b
    cluster.block.set()
    stop_bench(b)


def test_a_command_is_parsed_once_on_its_way_from_the_ack_to_its_module(bench, monkeypatch) -> None:
    # A spy on the module's own pure parse: the signed request goes through the real app over HTTP.
    seen: list[list[str]] = []
    real_parse = deploy.parse

    def counting_parse(args: list[str]) -> deploy.Args:
        seen.append(list(args))
        return real_parse(args)

    monkeypatch.setattr(deploy, "parse", counting_parse)
    assert bench.slash("U0DEPLOYER", "deploy rel-a to kimi-prod").status_code == 200
    answer = bench.replies_to("requester")[0]  # the module ran, with the arguments the ack parsed
    assert "Deployment #1 of *rel-a* to *kimi-prod* requested" in answer.text
    bench.gate_message("artifact", 1)
    assert seen == [["rel-a", "to", "kimi-prod"]]


def test_the_ack_comes_before_slow_work_finishes(bench) -> None:
    bench.slash("U0DEPLOYER", "deploy rel-a")
    for gate, who in (("artifact", "U0APPROVER1"), ("infrastructure", "U0ADMIN")):
        message = bench.gate_message(gate, 1)
        # The approval below starts the rollout watch, which blocks until the test lets it go.
        assert bench.click(who, message, APPROVE).status_code == 200
    bench.stub.wait_for(lambda s: any("DeploymentInProgress" in m.text for m in s.messages))
    assert bench.slash("U0APPROVER1", "status").status_code == 200  # answered while the rollout still runs
    status_text = blocks_text(bench.replies_to("requester", 2)[-1].blocks)
    assert "in flight:* :hourglass_flowing_sand: Deployment #1" in status_text and "rolling out" in status_text
    assert not bench.cluster.block.is_set()
    bench.cluster.block.set()
    bench.gate_message("model", 1)


def test_gates_lists_what_waits_for_me_with_buttons_and_cancel_ends_it(bench) -> None:
    bench.slash("U0DEPLOYER", "deploy rel-a")
    bench.gate_message("artifact", 1)
    bench.slash("U0APPROVER1", "gates")
    mine = bench.replies_to("requester", 2)[-1]
    assert "Artifact gate · deployment #1" in blocks_text(mine.blocks) and has_buttons(mine)
    bench.slash("U0DEPLOYER", "cancel 1")
    cancelled = bench.replies_to("requester", 3)[-1].text
    assert "Deployment #1 is cancelled: cancelled by <@U0DEPLOYER> at the artifact gate" in cancelled
    bench.slash("U0APPROVER1", "gates")
    assert "No gate is waiting for you." in bench.replies_to("requester", 4)[-1].text


def test_reservations_and_release_show(bench) -> None:
    bench.slash("U0DEPLOYER", "reservations")
    assert "None seen yet" in bench.replies_to("requester")[-1].text
    bench.slash("U0DEPLOYER", "release show rel-a")
    shown = blocks_text(bench.replies_to("requester", 2)[-1].blocks)
    assert "Release rel-a" in shown and "*tuple hash:*" in shown
    bench.slash("U0DEPLOYER", "release show nope")
    assert "no release" in bench.replies_to("requester", 3)[-1].text.lower()


def test_a_button_in_a_channel_the_bot_is_not_in_is_answered_through_the_response_url(make_ctx) -> None:
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    b = start_bench(ctx, missing_channels={"C0ELSEWHERE"})
    try:
        b.slash("U0DEPLOYER", "deploy rel-a")
        b.gate_message("artifact", 1)
        b.slash("U0APPROVER1", "gates", channel="C0ELSEWHERE")
        listed = b.replies_to("requester", 2)[-1]
        listed.channel = "C0ELSEWHERE"  # the ephemeral list as Slack shows it, in that channel
        b.click("U0APPROVER1", listed, APPROVE)
        answer = b.replies_to("requester", 3)[-1]
        assert "You approved the artifact gate of deployment #1" in answer.text
        b.gate_message("infrastructure", 1)
    finally:
        stop_bench(b)


def test_a_blocked_gate_is_rechecked_from_its_message_once_the_cause_is_fixed(make_ctx) -> None:
    from bot.domain.checks import Check
    from bot.views.actions import RECHECK

    verifier = FakeVerifier(extra=[Check.errored("artifact.aws", "could not be checked: S3 timed out")])
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES, ports=fake_ports(artifacts=verifier))
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    b = start_bench(ctx)
    try:
        b.slash("U0DEPLOYER", "deploy rel-a")
        blocked = b.gate_message("artifact", 1)
        assert "S3 timed out" in blocks_text(blocked.blocks)
        buttons = [e["action_id"] for blk in blocked.blocks for e in blk.get("elements", []) if "action_id" in e]
        assert buttons == [RECHECK, "gate_reject", "gate_show_checks"]  # no Approve; the passing checks behind "Show all"
        verifier.extra.clear()  # the outage is over
        b.click("U0DEPLOYER", blocked, RECHECK)
        assert "Re-running the artifact checks of deployment #1" in b.replies_to("U0DEPLOYER")[0].text
        b.stub.wait_for(lambda s: "the new report is further down the thread" in blocks_text(blocked.blocks)
                        and not has_buttons(blocked))
        fresh = b.stub.wait_for(lambda s: [m for m in s.messages
                                           if m is not blocked and "Artifact gate · deployment #1" in blocks_text(m.blocks)])
        assert any(e.get("action_id") == APPROVE for blk in fresh[-1].blocks for e in blk.get("elements", []))
    finally:
        stop_bench(b)


def test_capacity_shows_the_last_review_the_live_mix_and_the_drift(bench) -> None:
    from bot.adapters.store.models import CapacityReview
    from bot.domain.traffic_mix import TrafficMix

    friendly = TrafficMix(source="metrics", requests=400, prompt_p50=600, prompt_p90=2000, prompt_p99=6000,
                          output_p50=100, output_p90=300, output_p99=700)
    moved = friendly.model_copy(update={"prompt_p90": 40_000, "long_context_share": 0.3})
    now = bench.ctx.clock.now()
    with bench.ctx.uow() as uow:
        row = uow.endpoints.get("kimi-prod")
        uow.capacity.add_review(CapacityReview(
            endpoint_id=row.id, at=now, kind="traffic-gate", actor="kimi-ops", release="rel-a", max_model_len=262_144,
            knee=9, workload={"prompt_tokens": {"max": 6000}}, production_mix=friendly.model_dump(mode="json"),
            proposal={"max_concurrent_requests": 8}))
        uow.capacity.set_live_mix(row.id, now, moved.model_dump(mode="json"), {"marks": []})
        uow.commit()

    bench.slash("U0DEPLOYER", "capacity kimi-prod")

    shown = bench.replies_to("requester")[-1].text
    assert "last capacity review #1 (traffic-gate" in shown and "knee 9, proposed 8" in shown
    assert "live mix: metrics, 400 requests: prompt p50/p90/p99 600/40,000/6,000" in shown
    assert "capacity review due: p90 prompt 2,000 → 40,000 tokens; long-context share 0% → 30%" in shown
    refused = bench.slash("U0DEPLOYER", "capacity")  # a usage error is answered in the acknowledgement itself
    assert "Usage: `/kimi capacity ENDPOINT`" in refused.text
