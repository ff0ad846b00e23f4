"""Status tells what the cluster runs and what users get, beside kimi-ops's record, and says when it cannot know.

A release goes live through the engine onto kmock's Kubernetes emulator (the
production ``KubernetesCluster`` and the HyperPod operator simulator); someone
then edits the running object by hand. ``/kimi status`` — a signed slash command
into the real Bolt app — and the App Home show the cluster's image and limits
and name each difference as drift; the service reports the same. A cluster that
does not answer (refused, or accepting connections and never replying) makes
status answer within its budget with ``cluster: unknown``, never a hang.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster import ContextClusters, KubernetesCluster
from bot.adapters.cluster.rest import collection_path, object_path
from bot.sandbox.app_layer import ApplicationLayerStandIn
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.operator import OperatorSimulator
from bot.services.context import Context
from bot.services.deployments import decide_gate, request_deploy
from bot.services.engine import Engine
from bot.services.readiness import endpoint_status
from bot.services.releases import register_release
from bot.views.status import cluster_rows
from tests.conftest import START
from tests.slack_support import CHANNEL, blocks_text, start_bench, stop_bench
from tests.workflow_support import APPROVER_1, REQUESTER, ROLES, endpoint_config, fake_ports, release_data

NS = "model-serving"
OTHER_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-openai@sha256:" + "f" * 64

pytestmark = pytest.mark.timeout(240)


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace=NS, zone="us-east-1a")
        # The endpoint's door is an application layer (no route): it acknowledges each admission change.
        with OperatorSimulator(stand_in.rest(), NS, kind="hyperpod", step_seconds=0.02), \
                ApplicationLayerStandIn(stand_in.rest(), NS, "kimi-prod", changed=stand_in.changes()):
            yield stand_in


def live_on_the_emulator(make_ctx: Any, kube: KubeStandIn) -> Context:
    cluster = KubernetesCluster(kube.api_client(), poll_seconds=0.02, clock=FrozenClock(START))
    ctx: Context = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES, ports=fake_ports(cluster=cluster))
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    engine = Engine(ctx, readiness_pause=0)
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    while view.pending is not None:
        decide_gate(ctx, view.id, view.pending.gate, "approved", APPROVER_1, seen_report_hash=view.pending.report_hash,
                    seen_release_hash=view.pending.release_hash)
        view = engine.advance(view.id)
    assert view.state == "live", view
    return ctx


def hand_edit(kube: KubeStandIn) -> None:
    """``kubectl edit`` of the running endpoint: another image and twice the concurrency."""
    kube.rest().merge_patch(object_path("InferenceEndpointConfig", "kimi-prod", NS),
                            {"spec": {"worker": {"image": OTHER_IMAGE, "requestLimits": {"maxConcurrentRequests": 16}}}},
                            manager="kubectl-edit")


def test_status_reads_the_cluster_and_names_hand_edits_as_drift(make_ctx: Any, kube: KubeStandIn) -> None:
    ctx = live_on_the_emulator(make_ctx, kube)

    # The egress policy applied with the endpoint selects the model pod by the label the operator gives it.
    policy = kube.rest().get(object_path("NetworkPolicy", "kimi-prod-egress", NS))
    assert policy is not None
    selector = policy["spec"]["podSelector"]["matchLabels"]
    pods = kube.rest().items(collection_path("Pod", NS))
    assert pods and all(selector.items() <= p["metadata"]["labels"].items() for p in pods), (selector, pods)

    [status] = endpoint_status(ctx, "kimi-prod")
    truth = status.cluster
    assert truth is not None and truth.known and truth.drift == ()
    assert truth.observed is not None and truth.observed.release == "rel-a"
    assert truth.observed.limits == {"max_concurrent_requests": 8, "max_queue_size": 16, "overflow_status_code": 429}
    assert truth.users_get == "everyone reaches Kimi K3" and truth.observed.admission == "open"

    hand_edit(kube)

    [status] = endpoint_status(ctx, "kimi-prod")
    assert status.cluster is not None
    assert {d.field for d in status.cluster.drift} == {"image", "request limits"}
    assert status.cluster.applied_limits is not None and status.cluster.applied_limits["max_concurrent_requests"] == 16

    bench = start_bench(ctx)
    try:
        bench.slash(APPROVER_1.user_id, "status kimi-prod")
        text = bench.stub.wait_for(lambda s: [m.text for m in s.messages if "*cluster runs:*" in m.text], timeout=90)[-1]
        assert "*cluster runs:* rel-a (tuple " in text and "image vllm-openai@sha256:ffffffffffff" in text
        assert "*users get:* open — everyone reaches Kimi K3" in text
        assert "*limits applied:* 16 concurrent, queue 16, overflow 429" in text
        assert "*drift:* image: kimi-ops recorded " in text and ", the cluster has " + OTHER_IMAGE in text
        assert "*drift:* request limits: kimi-ops recorded max_concurrent_requests=8, " in text

        assert bench.home(APPROVER_1.user_id).status_code == 200
        home = bench.stub.wait_for(lambda s: s.calls_to("views.publish"), timeout=90)[-1]
        home_text = blocks_text(home.params["view"]["blocks"])
        assert "*cluster runs:* rel-a" in home_text and "*drift:* image: kimi-ops recorded" in home_text
    finally:
        stop_bench(bench)


def refusing_client(_context: str | None) -> client.ApiClient:
    config = client.Configuration()
    config.host = "http://127.0.0.1:9"
    config.retries = 0
    return client.ApiClient(config)


@pytest.fixture()
def silent_api() -> Iterator[str]:
    """An API server that accepts connections and never answers (a black-holed control plane)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("api", ["refused", "silent"])
def test_status_answers_quickly_with_cluster_unknown_when_the_cluster_cannot_be_read(
        make_ctx: Any, silent_api: str, api: str) -> None:
    def silent_client(_context: str | None) -> client.ApiClient:
        config = client.Configuration()
        config.host = silent_api
        config.retries = 0
        return client.ApiClient(config)

    clusters = ContextClusters(client_factory=refusing_client if api == "refused" else silent_client)
    ctx = make_ctx(endpoints=[endpoint_config(), endpoint_config("kimi-next")], roles=ROLES, ports=fake_ports(cluster=clusters))

    started = time.monotonic()
    statuses = endpoint_status(ctx)
    took = time.monotonic() - started

    assert took < 6, took  # every endpoint at once, within the page's budget, not one timeout after another
    assert sorted(s.name for s in statuses) == ["kimi-next", "kimi-prod"]
    for status in statuses:
        assert status.cluster is not None and not status.cluster.known
        rows = dict(cluster_rows(status.cluster, configured=status.request_limits.model_dump(mode="json"),
                                 accepted_source=False))
        assert rows["cluster runs"].startswith("unknown — the cluster could not be read in time")
        assert rows["users get"] == "unknown (kimi-ops set admission open)"
        assert rows["limits"] == "8 concurrent, queue 16, overflow 429 (kimi-ops's settings; not read from the cluster)"
        assert "drift" not in rows


def test_status_shows_stored_settings_changed_by_another_replica_at_once(make_ctx: Any) -> None:
    """Stored settings are validated once per change, not per render: a change made elsewhere shows on the next read."""
    ctx: Context = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES, ports=fake_ports())
    [before] = endpoint_status(ctx, "kimi-prod", observe=False)
    assert before.request_limits.max_concurrent_requests == 8 and not before.limits_accepted
    with ctx.uow() as uow:  # what accepting a traffic gate's proposal writes, from another replica
        row = uow.endpoints.get("kimi-prod")
        assert row is not None
        row.settings = {**row.settings, "accepted_request_limits": {"max_concurrent_requests": 12, "max_queue_size": 20}}
        uow.commit()
    [after] = endpoint_status(ctx, "kimi-prod", observe=False)
    assert after.request_limits.max_concurrent_requests == 12 and after.limits_accepted
    with ctx.uow() as uow:
        row = uow.endpoints.get("kimi-prod")
        assert row is not None
        row.settings = {k: v for k, v in row.settings.items() if k != "accepted_request_limits"}
        uow.commit()
    [again] = endpoint_status(ctx, "kimi-prod", observe=False)
    assert again.request_limits.max_concurrent_requests == 8 and not again.limits_accepted
