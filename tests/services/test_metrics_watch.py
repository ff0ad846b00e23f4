"""The metrics watch against the stand-ins: vLLM's /metrics, a DCGM exporter and the Kubernetes emulator.

Each alert rule fires once, recovers once, and never on a healthy busy endpoint. Traffic is counted into
the OpenAI stand-in (``simulate``) between runs while the clock moves, so hours of burn cost milliseconds.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bot.adapters.cluster.kube import KubernetesCluster
from bot.adapters.endpoint.dcgm import HttpGpuTelemetry
from bot.adapters.endpoint.openai import HttpEndpointClient
from bot.adapters.store.models import Endpoint, MetricSample
from bot.bootstrap import build_root
from bot.cli.main import app
from bot.config import EndpointSettings
from bot.sandbox import cluster_faults
from bot.sandbox.dcgm import DcgmExporter
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from bot.services import incidents
from bot.services.access import Identity
from bot.services.context import Ports
from bot.services.errors import Refused
from bot.services.metrics_watch import MINUTES_KEPT, retention, slo_view, watch_metrics
from commands import slo as slo_command
from tests.conftest import START
from tests.jobs_support import eks_endpoint, make_live

HEALTHY = {"requests": 600, "ttft": 0.2, "queue": 0.01, "e2e": 4.0}
BUSY = {**HEALTHY, "requests": 3000, "kv_usage": 0.97}  # a full KV cache that rejects nothing is healthy


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace="model-serving")
        yield stand_in


@pytest.fixture()
def world(make_ctx, clock, kube, request):
    """A live endpoint on the stand-ins; ``step(traffic, minutes)`` counts traffic, moves the clock, runs the watch."""
    namespace = f"w{abs(hash(request.node.nodeid)) % 10**8}"
    rest = kube.rest()
    rest.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    node = cluster_faults.nodes(rest)[0]
    with OpenAIServer() as server, DcgmExporter(gpus=8) as dcgm:
        ctx = make_ctx(
            endpoints=[eks_endpoint("kimi-prod", url=server.url, namespace=namespace, dcgm_url=dcgm.url,
                                    ttft_objective_ms=2000)],
            oncall_group="S0ONCALL", roles={"viewer": ["U0VIEWER"], "deployer": ["U0ONCALL"]},
            ports=Ports(endpoint=HttpEndpointClient(timeout=10), gpus=HttpGpuTelemetry(),
                        cluster=KubernetesCluster(kube.api_client(), clock=clock)),
        )
        make_live(ctx, "kimi-prod")
        cluster_faults.running_pod(rest, namespace, "kimi-prod", node)

        def step(traffic: dict | None = None, minutes: float = 5, times: int = 1) -> None:
            for _ in range(times):
                if traffic:
                    server.simulate(**traffic)
                clock.advance(dt.timedelta(minutes=minutes))
                watch_metrics(ctx)

        class World:
            pass

        w = World()
        w.ctx, w.server, w.dcgm, w.rest, w.namespace, w.node, w.step = ctx, server, dcgm, rest, namespace, node, step
        step()  # the first reading only sets where counting starts
        try:
            yield w
        finally:
            cluster_faults.node_condition(rest, node, "Ready", "True")
            cluster_faults.node_condition(rest, node, "MemoryPressure", "False")


def alerts(ctx) -> list[tuple[str, str]]:
    """(event kind, incident kind) of every watch message, in order."""
    with ctx.uow() as uow:
        return [(e.kind, e.payload["incident"]) for e in uow.events.undelivered(limit=10_000)
                if e.kind in ("watch.alert", "watch.recovered")]


def test_healthy_busy_endpoint_never_alerts(world) -> None:
    world.dcgm.configure(utilisation=100, power_watts=1100, memory_used_mib=280 * 1024)
    world.step(BUSY, times=24)  # two busy hours: full KV cache, every GPU at 100 %, no rejects
    assert alerts(world.ctx) == []
    with world.ctx.uow() as uow:
        assert uow.samples.count() == 25


def test_error_burn_pages_once_warns_once_and_recovers_once(world) -> None:
    world.step(HEALTHY, times=12)  # a healthy hour
    world.step({**HEALTHY, "errors": 60}, times=8)  # 10 % 5xx: ten times the 1 % budget
    kinds = alerts(world.ctx)
    assert ("watch.alert", "burn-page:errors") in kinds and ("watch.alert", "burn-warn:errors") in kinds
    assert kinds.count(("watch.alert", "burn-page:errors")) == 1  # opened once however long it burns
    with world.ctx.uow() as uow:
        [page] = [dict(e.payload) for e in uow.events.undelivered(limit=1000)
                  if e.payload.get("incident") == "burn-page:errors"]
    assert page["severity"] == "page" and "<!subteam^S0ONCALL>" in page["text"]
    assert "error rate" in page["reason"] and page["context"]["live_release"] == "rel-live"
    view = slo_view(world.ctx, "kimi-prod")
    errors = next(b for b in view.burns if b.objective.name == "errors")
    assert errors.budget_left is not None and errors.budget_left < 1

    # /kimi slo: the table with the burn and the open page, and the PNG of the last hours for the channel
    answer = slo_command.run(build_root(world.ctx), Identity("U0VIEWER"), "kimi-prod")
    assert "error rate (5xx)" in answer.text and "page" in answer.text and "budget left" in answer.text
    assert "*burn-page:errors* since" in answer.text
    with world.ctx.uow() as uow:
        [plot] = [dict(e.payload) for e in uow.events.undelivered(limit=1000) if e.kind == "slo.plot"]
    assert Path(plot["path"]).read_bytes().startswith(b"\x89PNG")

    world.step(HEALTHY, minutes=30, times=16)  # eight healthy hours
    kinds = alerts(world.ctx)
    assert kinds.count(("watch.recovered", "burn-page:errors")) == 1
    assert kinds.count(("watch.recovered", "burn-warn:errors")) == 1
    assert not [k for k in kinds if k[1].startswith("burn") and not k[1].endswith("errors")]


def test_slow_first_tokens_burn_the_latency_budget(world, monkeypatch, tmp_path) -> None:
    world.step(HEALTHY, times=12)
    world.step({**HEALTHY, "ttft": 3.0}, times=6)  # every request above the 2 s p99 bound
    assert ("watch.alert", "burn-page:ttft") in alerts(world.ctx)
    assert ("watch.alert", "burn-page:errors") not in alerts(world.ctx)

    # kimi-ops slo: the same table in the terminal, and the PNG where asked
    monkeypatch.setattr("bot.cli.jobs.context", lambda: world.ctx)
    shown = CliRunner().invoke(app, ["slo", "kimi-prod", "--png", str(tmp_path / "slo.png")])
    assert shown.exit_code == 0, shown.output
    assert "time to first token p99" in shown.output and "page" in shown.output and "burn-page:ttft since" in shown.output
    assert (tmp_path / "slo.png").read_bytes().startswith(b"\x89PNG")


def test_kv_pressure_with_rejects_pages_then_recovers(world) -> None:
    world.step({**BUSY, "rejects": 0}, times=2)
    assert alerts(world.ctx) == []
    world.step({**BUSY, "rejects": 40}, minutes=1)
    world.step({**BUSY, "rejects": 40}, minutes=1)
    assert alerts(world.ctx).count(("watch.alert", "kv-pressure")) == 1
    world.step(BUSY, minutes=1)
    assert alerts(world.ctx)[-1] == ("watch.recovered", "kv-pressure")


def test_gpu_faults_page_but_application_xids_do_not(world) -> None:
    world.dcgm.xid(2, 13)  # a graphics-engine exception: an application fault, not the node's
    world.step(HEALTHY)
    assert alerts(world.ctx) == []
    world.dcgm.xid(3, 79)  # fell off the bus
    world.step(HEALTHY)
    world.step(HEALTHY)
    [(kind, incident)] = alerts(world.ctx)
    assert (kind, incident) == ("watch.alert", "gpu")
    world.dcgm.xid(3, 0)
    world.step(HEALTHY)
    assert alerts(world.ctx)[-1] == ("watch.recovered", "gpu")
    world.dcgm.nvlink_errors(5, 12)
    world.step(HEALTHY)
    assert alerts(world.ctx)[-1] == ("watch.alert", "gpu")
    world.step(HEALTHY)  # the counter stopped growing
    world.dcgm.lose_gpu(7)
    world.step(HEALTHY)
    with world.ctx.uow() as uow:
        reasons = [e.payload["reason"] for e in uow.events.undelivered(limit=100) if e.kind == "watch.alert"]
    assert "7 of 8 GPUs" in reasons[-1]


def test_node_not_ready_pages_once_and_recovers_once(world) -> None:
    cluster_faults.node_condition(world.rest, world.node, "Ready", "False")
    world.step(HEALTHY, times=3)
    assert alerts(world.ctx) == [("watch.alert", "node")]
    cluster_faults.node_condition(world.rest, world.node, "Ready", "True")
    world.step(HEALTHY, times=2)
    assert alerts(world.ctx) == [("watch.alert", "node"), ("watch.recovered", "node")]
    with world.ctx.uow() as uow:
        said = [e.payload["text"] for e in uow.events.undelivered(limit=100) if e.kind == "watch.recovered"][-1]
    # How long it took in the words a drill uses ("4 s", "2 min 15 s"), never "0 min".
    assert re.search(r"recovered after (\d+ s|\d+ min \d\d s):", said), said


def test_a_silenced_kind_opens_and_recovers_quietly_until_the_silence_ends(world) -> None:
    cluster_faults.node_condition(world.rest, world.node, "Ready", "False")
    world.step(HEALTHY)
    with world.ctx.uow() as uow:
        [incident] = uow.incidents.open_of(uow.endpoints.get("kimi-prod").id, ["node"])
        incident_id = incident.id
    with pytest.raises(Refused, match="reason"):
        incidents.silence(world.ctx, Identity("U0ONCALL"), incident_id, 4, "  ")
    incidents.silence(world.ctx, Identity("U0ONCALL"), incident_id, 4, "AWS replaces the node, OPS-123")
    for ready in ("True", "False"):  # recovers, breaks again: both recorded, neither posted
        cluster_faults.node_condition(world.rest, world.node, "Ready", ready)
        world.step(HEALTHY)
    world.step(HEALTHY, minutes=60, times=4)  # the silence ends while the node is still down: nothing new
    cluster_faults.node_condition(world.rest, world.node, "Ready", "True")
    world.step(HEALTHY)
    cluster_faults.node_condition(world.rest, world.node, "Ready", "False")
    world.step(HEALTHY)
    with world.ctx.uow() as uow:
        said = [(e.kind, e.payload["silenced"]) for e in uow.events.undelivered(limit=1000)
                if e.kind in ("watch.alert", "watch.recovered")]
        audit = [a.action for a in uow.audit.list(subject="endpoint:kimi-prod")]
    assert said == [("watch.alert", False), ("watch.recovered", True), ("watch.alert", True),
                    ("watch.recovered", False), ("watch.alert", False)]
    assert "incident.silenced" in audit


def test_crash_looping_and_oom_killed_pods_page(world) -> None:
    cluster_faults.crash_loop(world.rest, world.namespace, "kimi-prod", restarts=6)
    world.step(HEALTHY, times=2)
    assert alerts(world.ctx) == [("watch.alert", "crashloop")]
    cluster_faults.run_again(world.rest, world.namespace, "kimi-prod")
    world.step(HEALTHY)
    assert alerts(world.ctx)[-1] == ("watch.recovered", "crashloop")
    cluster_faults.oom_restart(world.rest, world.namespace, "kimi-prod")
    world.step(HEALTHY)
    with world.ctx.uow() as uow:
        last = [e.payload for e in uow.events.undelivered(limit=100) if e.kind == "watch.alert"][-1]
    assert last["incident"] == "crashloop" and "OOM-killed" in last["reason"]


def test_samples_stay_bounded(ctx, clock) -> None:
    """Nine days of readings every minute keep one row an hour past the recent hours, none past the budget window."""
    with ctx.uow() as uow:
        uow.endpoints.add(Endpoint(name="kimi-prod", kind="eks", environment="prod", namespace="ns", url="http://x",
                                   created_at=START))
        endpoint_id = uow.endpoints.get("kimi-prod").id
        at = START
        while at < START + dt.timedelta(days=9):
            # minute readings for the last nine hours, one every 20 minutes before (both need thinning)
            uow.samples.add(MetricSample(endpoint_id=endpoint_id, at=at, step=60, requests=0, errors=0, rejects=0,
                                         ttft_events=0, ttft_bad=0, queue_events=0, queue_bad=0, e2e_events=0, e2e_bad=0))
            at += dt.timedelta(minutes=1 if at > START + dt.timedelta(days=9, hours=-9) else 20)
        uow.commit()
    now = at
    with ctx.uow() as uow:
        uow.samples.thin(now, minutes_kept=MINUTES_KEPT, retention=retention(EndpointSettings(name="kimi-prod")))
        uow.commit()
        rows = [(r.at, r.step, r.hour) for r in uow.samples.since(endpoint_id, START)]
    minutes = [at for at, step, _ in rows if step == 60]
    hours = [hour for _, step, hour in rows if step == 3600]
    assert len(minutes) == 7 * 60 and all(now - at <= MINUTES_KEPT for at in minutes)
    assert len(set(hours)) == len(hours) and now - rows[0][0] <= dt.timedelta(days=7, hours=1)
    assert len(rows) <= 7 * 24 + 1 + 7 * 60


def test_a_drifted_mix_asks_for_a_capacity_review_once_and_recovers_once(world) -> None:
    from bot.domain.workload import synthesise
    from bot.services.capacity import capacity_view
    from bot.services.traffic_mix import record_review

    def review() -> None:
        """What a traffic gate or an on-demand sweep leaves: a capacity review of production's mix as it is now."""
        spec = world.ctx.settings.endpoint("kimi-prod")
        view = capacity_view(world.ctx, "kimi-prod")
        record_review(world.ctx, spec, kind="on-demand", actor="U0ONCALL", release="rel-live", deployment_id=None,
                      max_model_len=spec.max_model_len, knee=9, proposal={"max_concurrent_requests": 8},
                      workload=synthesise(view.live_mix, prompt_words=200, max_tokens=64,
                                          max_model_len=spec.max_model_len, multimodal=False, prod=True))

    friendly = {**HEALTHY, "prompt_tokens": 900, "output_tokens": 150}
    world.step(friendly, times=2)
    review()
    world.step(friendly, times=3)
    assert alerts(world.ctx) == []

    # Production now sends 60,000-token prompts as often as short ones: the mix has moved past what was measured.
    heavy = {**HEALTHY, "requests": 3000, "prompt_tokens": 60_000, "output_tokens": 400}
    world.step(heavy, times=4)

    assert alerts(world.ctx) == [("watch.alert", "capacity-review")]  # once, however long it stays moved
    with world.ctx.uow() as uow:
        [alert] = [dict(e.payload) for e in uow.events.undelivered(limit=1000) if e.kind == "watch.alert"]
    assert alert["channel"] == "CKIMIPROD" and alert["severity"] == "warn"
    assert "capacity review due: p90 prompt" in alert["text"] and "long-context share 0% →" in alert["text"]
    assert "`kimi-ops capacity kimi-prod --sweep`" in alert["text"]
    assert capacity_view(world.ctx, "kimi-prod").drift
    world.step(heavy, minutes=60, times=25)  # a day later the live mix (the last 24 hours) is all the new traffic
    assert alerts(world.ctx) == [("watch.alert", "capacity-review")]

    review()  # a new review measured the moved mix
    world.step(heavy, minutes=60, times=2)
    assert alerts(world.ctx) == [("watch.alert", "capacity-review"), ("watch.recovered", "capacity-review")]
    assert capacity_view(world.ctx, "kimi-prod").drift == []
