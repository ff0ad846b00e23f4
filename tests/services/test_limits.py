"""Accepted limits run at once, only another approver accepts them, and going live above them needs a reason.

The cluster is kmock's Kubernetes emulator with the HyperPod operator simulator,
driven by the production ``KubernetesCluster``; the traffic gate sweeps the local
OpenAI-compatible server (its concurrency limit is what the sweep finds); the
store is real SQLite and PostgreSQL. Accepting the proposal at the traffic gate
re-renders the candidate with it and applies it (the cluster's object shows it,
the deployment's stored manifest is a new revision beside the first), and a later
rollback to that release restores exactly those bytes, limits included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster import KubernetesCluster
from bot.adapters.cluster.rest import object_path
from bot.adapters.endpoint import HttpEndpointClient
from bot.adapters.endpoint.loadgen import HttpLoadGenerator
from bot.domain.checks import Check, GateReport
from bot.sandbox.app_layer import ApplicationLayerStandIn
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.operator import OperatorSimulator
from bot.services.access import Identity
from bot.services.capacity import capacity_view
from bot.services.deployments import decide_gate, get_deployment, request_deploy, request_rollback
from bot.services.engine import Engine
from bot.services.errors import Refused
from bot.services.readiness import endpoint_status
from bot.services.releases import register_release
from bot.services.traffic_gate import accept_proposed_limits
from bot.services.transitions import store_gate_report
from tests.conftest import START
from tests.workflow_support import ADMIN, APPROVER_1, REQUESTER, ROLES, endpoint_config, fake_ports, release_data, workflow

NS = "model-serving"
SWEEP = {
    "ceiling": 12, "warmup_requests": 1, "steady_requests_per_slot": 2, "steady_seconds": 20, "burst_rounds": 1,
    "refine_steps": 3, "max_requests": 600, "max_seconds": 60, "request_timeout_seconds": 10,
    "max_tokens": 8, "prompt_words": 48, "prefix_modes": ["unique"],
}

pytestmark = pytest.mark.timeout(300)


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace=NS, zone="us-east-1a")
        # The endpoint's door is an application layer (no route): it acknowledges each admission change. The operator
        # plays a rollout every 20 ms and, with none to play, waits for the emulator's next write (as the sandbox's
        # does) rather than listing the objects 50 times a second for the whole test.
        with OperatorSimulator(stand_in.rest(), NS, kind="hyperpod", step_seconds=0.02, changed=stand_in.changes()), \
                ApplicationLayerStandIn(stand_in.rest(), NS, "kimi-prod", changed=stand_in.changes()):
            yield stand_in


@pytest.fixture()
def metrics_reader() -> Iterator[HttpEndpointClient]:
    """The sweep's /metrics reader (the endpoint port is a double here), closed after the test with its socket."""
    client = HttpEndpointClient(timeout=5)
    yield client
    client.close()


@pytest.fixture()
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(reply="OK, noted.", first_token_delay=0.1, token_delay=0.005) as srv:
        srv.configure(max_running=6, max_waiting=0, overflow_status=429)
        yield srv


def running_limits(kube: KubeStandIn) -> dict[str, Any]:
    obj = kube.rest().get(object_path("InferenceEndpointConfig", "kimi-prod", NS))
    assert obj is not None
    return dict(obj["spec"]["worker"]["requestLimits"])


def to_gate(ctx: Any, engine: Engine, deployment_id: int, gate: str) -> Any:
    """Approve (as APPROVER_1) every gate before ``gate``; the deployment waiting there."""
    view = engine.advance(deployment_id)
    while view.pending is not None and view.pending.gate != gate:
        decide_gate(ctx, deployment_id, view.pending.gate, "approved", APPROVER_1,
                    seen_report_hash=view.pending.report_hash, seen_release_hash=view.pending.release_hash)
        view = engine.advance(deployment_id)
    assert view.pending is not None and view.pending.gate == gate, view
    return view


def approve(ctx: Any, engine: Engine, view: Any, **kwargs: Any) -> Any:
    decide_gate(ctx, view.id, view.pending.gate, "approved", APPROVER_1, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash, **kwargs)
    return engine.advance(view.id)


def test_accepted_limits_are_applied_as_a_new_revision_and_a_rollback_restores_them(
        make_ctx: Any, kube: KubeStandIn, server: OpenAIServer, metrics_reader: HttpEndpointClient) -> None:
    cluster = KubernetesCluster(kube.api_client(), poll_seconds=0.02, clock=FrozenClock(START))
    # /metrics read four times a second while the sweep runs, not twenty: its knee is the server's 429s.
    loadgen = HttpLoadGenerator(metrics=metrics_reader.peak_metrics, metrics_interval=0.25)
    ctx = make_ctx(
        endpoints=[endpoint_config(url=server.url, request_limits={"max_concurrent_requests": 32, "max_queue_size": 64})],
        roles=ROLES, traffic_sweep=SWEEP, traffic_objectives={"ttft_p99_ms": 2000},
        ports=fake_ports(cluster=cluster, loadgen=loadgen),
    )
    engine = Engine(ctx, readiness_pause=0)
    for name in ("rel-a", "rel-b"):
        register_release(ctx, release_data(name, EXTRA=name), "U0DEPLOYER")

    # The admin requests rel-a (an admin is an approver too); the candidate reaches its traffic gate, 32 admitted.
    first = to_gate(ctx, engine, request_deploy(ctx, "rel-a", "kimi-prod", ADMIN).id, "traffic")
    # The server's limit (6) on a quiet machine; a loaded one can meet a 429 a level early. What follows is about
    # applying what was proposed, so it follows the proposal (the exact knee: tests/services/test_traffic_gate.py).
    safe = first.pending.report["attachments"]["proposal"]["max_concurrent_requests"]
    assert 0 < safe <= 6
    assert running_limits(kube)["maxConcurrentRequests"] == 32
    rendered = get_deployment(ctx, first.id).manifest_hash

    # Approving as it stands would go live above what was measured safe: refused, naming the proposal.
    with pytest.raises(Refused, match=rf"would go live with 32 concurrent .* measured safe {safe} "
                                      rf"\(proposed maxConcurrentRequests {safe}"):
        approve(ctx, engine, first)
    # The requester may not accept the proposal on their own deployment.
    with pytest.raises(Refused, match="another approver must accept"):
        accept_proposed_limits(ctx, None, first.id, ADMIN, seen_report_hash=first.pending.report_hash)
    assert running_limits(kube)["maxConcurrentRequests"] == 32
    with ctx.uow() as uow:
        whys = [a.details.get("why") for a in uow.audit.list(subject=f"deployment:{first.id}", limit=100)]
    assert "limits_above_proposal" in whys and "requester" in whys

    accepted = accept_proposed_limits(ctx, None, first.id, APPROVER_1, seen_report_hash=first.pending.report_hash)

    # At once: the cluster runs the candidate with the accepted limits, and its stored manifest is revision 2.
    assert running_limits(kube)["maxConcurrentRequests"] == safe
    assert accepted.revision == 2 and accepted.applied_sha256 == get_deployment(ctx, first.id).manifest_hash != rendered
    with ctx.uow() as uow:
        revisions = [(r.revision, r.sha256, r.previous_sha256) for r in uow.manifests.for_deployment(first.id)]
        revised = [(a.actor, a.details["old_sha256"], a.details["new_sha256"])
                   for a in uow.audit.list(subject=f"deployment:{first.id}", limit=100) if a.action == "manifest.revised"]
        first_manifest = uow.deployments.get(first.id).applied_manifest
    assert revisions == [(1, rendered, None), (2, accepted.applied_sha256, rendered)]
    assert revised == [(APPROVER_1.user_id, rendered, accepted.applied_sha256)]
    assert _endpoint_doc(first_manifest)["spec"]["worker"]["requestLimits"]["maxConcurrentRequests"] == safe
    assert approve(ctx, engine, get_deployment(ctx, first.id)).state == "live"

    # rel-b measures more headroom; its own acceptance is applied to it.
    server.configure(max_running=10)
    second = to_gate(ctx, engine, request_deploy(ctx, "rel-b", "kimi-prod", REQUESTER).id, "traffic")
    proposed = second.pending.report["attachments"]["proposal"]["max_concurrent_requests"]
    assert proposed > safe
    accept_proposed_limits(ctx, None, second.id, APPROVER_1, seen_report_hash=second.pending.report_hash)
    assert approve(ctx, engine, get_deployment(ctx, second.id)).state == "live"
    assert running_limits(kube)["maxConcurrentRequests"] == proposed

    # Rolling back to rel-a restores rel-a's own accepted limits: its stored revision, byte for byte.
    rollback = request_rollback(ctx, "kimi-prod", REQUESTER)
    with ctx.uow() as uow:
        assert uow.deployments.get(rollback.id).applied_manifest == first_manifest
    view = to_gate(ctx, engine, rollback.id, "artifact")
    assert approve(ctx, engine, view).state == "live"
    assert running_limits(kube)["maxConcurrentRequests"] == safe
    obj = kube.rest().get(object_path("InferenceEndpointConfig", "kimi-prod", NS))
    assert obj is not None and obj["spec"] == _endpoint_doc(first_manifest)["spec"]

    # Status says what runs (rel-a's) and that the endpoint's newest accepted limits do not.
    [status] = endpoint_status(ctx, "kimi-prod")
    assert status.cluster is not None and status.cluster.known
    assert status.cluster.applied_limits is not None and status.cluster.applied_limits["max_concurrent_requests"] == safe
    assert status.cluster.accepted_limits is not None and status.cluster.accepted_limits["max_concurrent_requests"] == proposed
    assert not status.cluster.drift
    # The capacity view compares production's concurrency with the limit accepted, not the settings file's 32.
    assert capacity_view(ctx, "kimi-prod").accepted_limit == proposed


def traffic_report(proposed: int) -> GateReport:
    return GateReport(gate="traffic", checks=[Check.passed("traffic.knee", f"knee at {proposed + 1}")],
                      attachments={"proposal": {"max_concurrent_requests": proposed, "max_queue_size": 12,
                                                "overflow_status_code": 429}})


def test_approval_above_the_proposal_is_refused_without_a_reason_and_recorded_with_one(make_ctx: Any) -> None:
    ctx, engine = workflow(make_ctx)
    view = to_gate(ctx, engine, request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id, "traffic")
    with ctx.uow() as uow:  # the sweep's report (the fakes run none): 6 measured safe, the endpoint admits 8
        store_gate_report(uow, ctx, uow.deployments.get(view.id), traffic_report(6))
        uow.commit()
    view = get_deployment(ctx, view.id)

    for override in (None, "   "):
        with pytest.raises(Refused, match=r"kimi-prod would go live with 8 concurrent requests admitted, above the "
                                          r"measured safe 6 \(proposed maxConcurrentRequests 6, maxQueueSize 12\)"):
            approve(ctx, engine, view, override_reason=override)
    assert get_deployment(ctx, view.id).state == "traffic_gate"

    assert approve(ctx, engine, view, override_reason="launch traffic is capped upstream at 6").state == "live"
    with ctx.uow() as uow:
        row = uow.gates.latest(view.id, "traffic")
        seen, decided_by = row.seen, row.decided_by
        approved = [a.details for a in uow.audit.list(subject=f"deployment:{view.id}", limit=100) if a.action == "gate.approved"]
    override = {"reason": "launch traffic is capped upstream at 6",
                "above": "8 concurrent requests admitted, above the measured safe 6 "
                         "(proposed maxConcurrentRequests 6, maxQueueSize 12)"}
    assert seen["limits_override"] == override and decided_by == APPROVER_1.user_id
    assert approved[0]["limits_override"] == override


def test_a_proposal_at_or_above_what_the_endpoint_admits_needs_no_override(make_ctx: Any) -> None:
    ctx, engine = workflow(make_ctx)
    view = to_gate(ctx, engine, request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id, "traffic")
    with ctx.uow() as uow:
        store_gate_report(uow, ctx, uow.deployments.get(view.id), traffic_report(8))
        uow.commit()
    assert approve(ctx, engine, get_deployment(ctx, view.id)).state == "live"
    with ctx.uow() as uow:
        assert "limits_override" not in uow.gates.latest(view.id, "traffic").seen


def test_the_requester_cannot_accept_even_where_they_may_approve(make_ctx: Any) -> None:
    ctx, engine = workflow(make_ctx)
    admin = Identity("U0ADMIN")
    view = to_gate(ctx, engine, request_deploy(ctx, "rel-a", "kimi-prod", admin).id, "traffic")
    with ctx.uow() as uow:
        store_gate_report(uow, ctx, uow.deployments.get(view.id), traffic_report(6))
        uow.commit()
    report_hash = get_deployment(ctx, view.id).pending.report_hash
    with pytest.raises(Refused, match=f"you requested deployment #{view.id}"):
        accept_proposed_limits(ctx, None, view.id, admin, seen_report_hash=report_hash)
    with ctx.uow() as uow:
        refusal = uow.audit.list(subject=f"deployment:{view.id}", limit=1)[0]
        assert (refusal.action, refusal.actor, refusal.details["why"]) == ("endpoint.limits_refused", "U0ADMIN", "requester")
    assert accept_proposed_limits(ctx, None, view.id, APPROVER_1, seen_report_hash=report_hash).revision == 2


def _endpoint_doc(manifest: str) -> dict:
    """The InferenceEndpointConfig among the manifest's documents (its egress NetworkPolicy comes first)."""
    docs = [doc for doc in yaml.safe_load_all(manifest) if doc and doc.get("kind") == "InferenceEndpointConfig"]
    assert len(docs) == 1, manifest
    return docs[0]
