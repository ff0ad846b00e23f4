"""End to end through Slack only: deploy → four approvals by two people → live → rollback, as the channel sees it.

Every adapter is the real one, talking to its stand-in over HTTP: moto (S3 weights,
ECR image), kmock's Kubernetes emulator with the HyperPod operator simulator, the
OpenAI-compatible server (readiness completions, vLLM metrics for the drain), the
capacity stand-in (training plan), and the Slack Web API stub. The only input is
signed Slack requests; the assertions read what the channel shows.
"""

from __future__ import annotations

import datetime as dt

import httpx
import pytest
import yaml

from bot.adapters.aws.artifacts import S3EcrArtifactVerifier
from bot.adapters.aws.reservations import AwsReservationSource
from bot.adapters.cluster import KubernetesCluster
from bot.adapters.endpoint.openai import HttpEndpointClient
from bot.config import EndpointSettings
from bot.domain.release import ReleaseManifest
from bot.sandbox import seed_good_release, start_moto
from bot.sandbox.app_layer import ApplicationLayerStandIn
from bot.sandbox.capacity import CapacityStandIn
from bot.sandbox.governance import seed_governance
from bot.sandbox.kube import seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.operator import OperatorSimulator
from bot.services.context import Ports
from bot.services.releases import register_release
from bot.services.reservations import watch_reservations
from bot.views.actions import APPROVE, SHOW_CHECKS
from tests.conftest import EXAMPLE_RELEASE, START
from tests.slack_support import (
    CHANNEL,
    blocks_text,
    has_buttons,
    moves,
    progress_texts,
    start_bench,
)
from tests.workflow_support import ROLES, endpoint_config

GATES = ("artifact", "infrastructure", "model", "traffic")
NS = "model-serving"


@pytest.fixture()
def stand_ins():
    moto = start_moto()
    httpx.post(f"{moto.url}/moto-api/reset", timeout=10).raise_for_status()
    kube = start_kube()
    seed_cluster(kube.rest(), namespace=NS, zone="us-east-1a")
    operator = OperatorSimulator(kube.rest(), NS).__enter__()
    openai = OpenAIServer().start()
    # The endpoint has no route: its door is an application layer that acknowledges each admission change.
    layer = ApplicationLayerStandIn(kube.rest(), NS, "kimi-prod", changed=kube.changes()).start()
    try:
        yield moto, kube, openai
    finally:
        layer.stop()
        openai.stop()
        operator.stop()
        kube.stop()
        moto.stop()


@pytest.fixture()
def bench(make_ctx, stand_ins):
    moto, kube, openai = stand_ins
    s3, ecr = moto.client("s3"), moto.client("ecr")
    first = seed_good_release(s3, ecr, ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text())))
    second = first.model_dump(mode="json")
    second["name"] = "kimi-k3-2026-09-01"
    second["serving"]["env"]["VLLM_LOGGING_LEVEL"] = "INFO"
    second["trust_remote_code_exception"] = "SEC-EXC-2026-0157"  # each release its own reviewed exception
    endpoint = endpoint_config(channel=CHANNEL, url=openai.url, namespace=NS)
    capacity = CapacityStandIn()
    capacity.cover(EndpointSettings(**endpoint), START - dt.timedelta(days=1), START + dt.timedelta(days=20))
    ctx = make_ctx(endpoints=[endpoint], roles=ROLES, ports=Ports(
        artifacts=S3EcrArtifactVerifier(s3, ecr),
        cluster=KubernetesCluster(kube.api_client(), poll_seconds=0.02),
        endpoint=HttpEndpointClient(timeout=10.0),
        reservations=AwsReservationSource(capacity.client_factory()),
    ))
    register_release(ctx, first.model_dump(mode="json"), "U0DEPLOYER")
    register_release(ctx, second, "U0DEPLOYER")
    seed_governance(ctx, [first, ReleaseManifest.model_validate(second)], ctx.settings.endpoints)
    # U0APPROVER2 is an approver only through the S0APPROVERS user group.
    with start_bench(ctx, groups={"S0APPROVERS": ["U0APPROVER2"]}) as b:
        yield b


def root_of(bench, deployment_id: int):
    return next((m for m in bench.stub.messages if m.thread_ts is None and m.ephemeral_to is None
                 and f"Deployment #{deployment_id}:" in m.text), None)


def wait_state(bench, deployment_id: int, words: str):
    return bench.stub.wait_for(lambda s: (root := root_of(bench, deployment_id)) and words in root.text and root, timeout=180)


def approve_all(bench, deployment_id: int, gates: tuple[str, ...]) -> None:
    approvers = ("U0APPROVER1", "U0APPROVER2")
    for i, gate in enumerate(gates):
        message = bench.gate_message(gate, deployment_id)
        assert has_buttons(message), blocks_text(message.blocks)
        who = approvers[i % 2]
        assert bench.click(who, message, APPROVE).status_code == 200
        bench.stub.wait_for(lambda s, who=who, message=message: f"Approved by <@{who}>" in blocks_text(message.blocks)
                            and not has_buttons(message), timeout=180)


def test_deploy_four_approvals_live_then_rollback_all_through_slack(bench) -> None:
    bench.slash("U0DEPLOYER", "deploy kimi-k3-2026-08-01 to kimi-prod")
    approve_all(bench, 1, GATES)
    root = wait_state(bench, 1, "— live")
    thread = bench.stub.thread(CHANNEL, root.ts)
    # A quiet thread: its root, one message per gate and one progress message, edited in place.
    posts = [m for m in thread if not m.files]  # the gate plots are uploads beside their gate messages
    keys = sorted(((m.metadata or {}).get("event_payload") or {}).get("key", "") for m in posts)
    # The ramp has one message of its own, edited in place by each step, as the progress message is.
    assert keys == sorted(["deployment:1", "progress:1", "ramp:1", *(f"gate:{i}" for i in range(1, 5))]), keys
    texts = progress_texts(bench.stub, 1)
    assert "*Progress:* ended: live" in texts[-1]
    # Coalesced: a burst of rollout lines and moves is one edit, and no version names an older step than the one before.
    assert len(texts) < 30, len(texts)
    # The single-node procedure: users are closed out and drained before apply, and meet it only after the gates.
    steps = moves(bench.stub, 1)
    assert steps == ["artifact gate", "infrastructure gate", "closing", "draining", "applying", "rolling out",
                     "readiness", "model gate", "traffic gate", "ramping", "live"], steps

    bench.slash("U0DEPLOYER", "deploy kimi-k3-2026-09-01")
    approve_all(bench, 2, GATES)
    wait_state(bench, 2, "— live")
    wait_state(bench, 1, "— superseded")  # the first thread's title no longer claims it is live

    bench.slash("U0DEPLOYER", "rollback kimi-prod")
    assert "Rollback #3 of *kimi-prod* to *kimi-k3-2026-08-01*" in bench.replies_to("requester", 3)[-1].text
    rollback_gate = bench.gate_message("artifact", 3)
    # Its passing checks are counted; "Show every check" gives the approver the whole report, them alone.
    assert "checks passed" in blocks_text(rollback_gate.blocks)
    told = len(bench.stub.seen_by("U0APPROVER2"))
    bench.click("U0APPROVER2", rollback_gate, SHOW_CHECKS)
    report = blocks_text(bench.replies_to("U0APPROVER2", told + 1)[-1].blocks)
    assert "manifest.restore" in report and "restores the exact manifest applied before" in report
    bench.click("U0APPROVER2", rollback_gate, APPROVE)
    rolled = wait_state(bench, 3, "— live")
    assert "rollback of *kimi-k3-2026-08-01*" in rolled.text
    steps = moves(bench.stub, 3)
    for state in ("closing", "draining", "applying", "rolling out", "readiness", "evaluation", "reopening", "live"):
        assert state in steps, steps

    bench.slash("U0APPROVER1", "history kimi-prod")
    history = blocks_text(bench.replies_to("requester", 4)[-1].blocks)
    assert "*#3* rollback of *kimi-k3-2026-08-01* — live" in history
    assert "*#2* deploy of *kimi-k3-2026-09-01* — superseded" in history
    assert "infrastructure <@U0APPROVER2>" in history

    watch_reservations(bench.app.ctx)  # the scheduled watch's run: it stores the training plan it reads
    bench.home("U0APPROVER1")
    home = bench.stub.wait_for(lambda s: s.calls_to("views.publish"))[-1].params["view"]
    text = blocks_text(home["blocks"])
    assert "*live release:* kimi-k3-2026-08-01" in text and "*in flight:* nothing" in text
    assert "*last readiness:*" in text and "answered: first token" in text
    assert "*reservation:* 20.0 days left" in text  # the plan ends 20 days after the frozen clock's now
