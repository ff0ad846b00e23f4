"""Who watches a pair service after go-live when its sides have different watchers, as a platform engineer sees it.

One side on Prometheus (``slo.alerting: prometheus``), the other on kimi-ops's built-in watch: each side is paged
by its own watcher, and the service gets no rules of its own (Prometheus cannot judge it whole: it pages only for
the side it watches). ``/kimi status SERVICE``, each side's status and ``kimi-ops slo rules`` say exactly that. Once
both sides are on Prometheus (the settings changed, kimi-ops restarted), the next round applies the service's own
rule, and they all say Prometheus judges the service whole. Every rule object in the emulator passes promtool.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bot.adapters.cluster.kube import KubernetesCluster
from bot.adapters.cluster.rest import object_path
from bot.adapters.endpoint.openai import HttpEndpointClient
from bot.bootstrap import Root
from bot.cli.main import app
from bot.domain.alert_rules import rule_object_name
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from bot.services.access import Identity
from bot.services.context import Context, Ports
from bot.services.engine import Engine
from bot.services.readiness import endpoint_status
from bot.services.scheduling import run_job
from commands import status
from tests.jobs_support import eks_endpoint, make_live
from tests.promtool_support import check_rules
from tests.workflow_support import ROLES

SERVICE, BLUE, GREEN = "kimi", "kimi-blue", "kimi-green"
PAIR = {"name": SERVICE, "sides": [BLUE, GREEN], "route": {"gateway": {"name": "gw", "namespace": "gateways"}}}
DEPLOYER = Identity("U0DEPLOYER")


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace="model-serving")
        yield stand_in


def users_on(ctx: Context, side: str) -> None:
    """What a side's go-live records: every user on it, none on the other side."""
    with ctx.uow() as uow:
        for row in uow.endpoints.list():
            row.admission = "open" if row.name == side else "closed"
            row.admission_open = row.name == side
        uow.commit()


def rule_in_cluster(kube: KubeStandIn, name: str, namespace: str, tmp_path: Path) -> dict | None:
    """The rule object ``name`` as the cluster holds it, its groups checked by promtool; None when absent."""
    rule = kube.rest().get(object_path("PrometheusRule", rule_object_name(name), namespace))
    if rule is not None:
        path = tmp_path / f"{name}.rules.yaml"
        path.write_text(yaml.safe_dump(rule["spec"]))
        check_rules(path)
    return rule


def service_status_text(ctx: Context) -> str:
    return status.run(Root(ctx, Engine(ctx)), DEPLOYER, SERVICE).text.replace("*", "")  # as read, without bold


def slo_rules(ctx: Context, name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict]:
    """``kimi-ops slo rules NAME``: the comment above the rules (joined) and the rules."""
    monkeypatch.setattr("bot.cli.slo_rules.context", lambda: ctx)
    shown = CliRunner().invoke(app, ["slo", "rules", name])
    assert shown.exit_code == 0, shown.output
    comment = " ".join(line[2:] for line in shown.output.splitlines() if line.startswith("# "))
    return comment, yaml.safe_load(shown.output)


def test_a_pair_with_one_side_on_prometheus_is_watched_side_by_side_and_says_so(
        make_ctx, db_url, clock, kube, monkeypatch, tmp_path) -> None:
    namespace = f"pair-{db_url.split(':')[0].split('+')[0]}"  # one per database: the module's emulator is shared
    with OpenAIServer() as server:
        def settings(green_alerting: str) -> dict:
            sides = [(BLUE, "prometheus"), (GREEN, green_alerting)]
            return {"endpoints": [eks_endpoint(side, url=server.url, namespace=namespace, slo={"alerting": alerting})
                                  for side, alerting in sides],
                    "services": [PAIR], "roles": ROLES,
                    "ports": Ports(endpoint=HttpEndpointClient(timeout=10),
                                   cluster=KubernetesCluster(kube.api_client(), clock=clock))}

        ctx = make_ctx(**settings("builtin"))
        make_live(ctx, BLUE, "rel-a")
        make_live(ctx, GREEN, "rel-b")
        users_on(ctx, GREEN)

        # An hour of 10 % 5xx on the side users are on, read every five minutes: its own watcher pages.
        for _ in range(14):
            server.simulate(requests=600, errors=60, ttft=0.2, e2e=4.0)
            clock.advance(dt.timedelta(minutes=5))
            run = run_job(ctx, "metrics-watch", trigger="test")
        assert f"{GREEN}: sampled" in run.summary and f"{BLUE}: sampled" not in run.summary, run.summary
        with ctx.uow() as uow:
            green = uow.endpoints.get(GREEN)
            assert [i.kind for i in uow.incidents.open_of(green.id, ["burn-page:errors"])] == ["burn-page:errors"]
        # Prometheus has the rules of the side it watches, and none of the service's: it could not judge it whole.
        assert rule_in_cluster(kube, BLUE, namespace, tmp_path) is not None
        assert rule_in_cluster(kube, SERVICE, namespace, tmp_path) is None
        assert rule_in_cluster(kube, GREEN, namespace, tmp_path) is None

        said = service_status_text(ctx)
        assert (f"pages after go-live: {BLUE}: Prometheus and Alertmanager; {GREEN}: kimi-ops's metrics watch "
                "(built in)") in said, said
        assert (f"{SERVICE} as a whole: not watched: its sides have different watchers, so each is judged alone "
                f"(`slo.alerting: prometheus` on {GREEN} too gives {SERVICE} rules of its own)") in said, said
        sides = {s.name: s.watched_by for s in endpoint_status(ctx, observe=False)}
        assert sides[BLUE].startswith("Prometheus and Alertmanager") and sides[GREEN].startswith("kimi-ops's metrics")
        assert sides[BLUE].endswith(f"; {SERVICE} as a whole: not watched (its other side, {GREEN}: kimi-ops's metrics "
                                    "watch (built in), has another watcher)")

        comment, rule = slo_rules(ctx, SERVICE, monkeypatch)
        assert comment.startswith(f"Not applied: {SERVICE} as a whole is not watched: its sides have different watchers")
        assert f"{BLUE}: Prometheus and Alertmanager; {GREEN}: kimi-ops's metrics watch (built in)" in comment
        assert rule["metadata"]["name"] == rule_object_name(SERVICE)  # what kimi-ops would apply, for review
        comment, _ = slo_rules(ctx, BLUE, monkeypatch)
        assert comment.startswith(f"kimi-ops applies this {rule_object_name(BLUE)}")
        comment, _ = slo_rules(ctx, GREEN, monkeypatch)
        assert comment.startswith(f"Not applied: {GREEN}'s pages come from kimi-ops's metrics watch")

        # The platform team moves the other side to Prometheus too; kimi-ops restarts with the new settings.
        ctx = make_ctx(**settings("prometheus"))
        run = run_job(ctx, "metrics-watch", trigger="test")
        assert f"{SERVICE}: Prometheus rules applied (rel-b)" in run.summary, run.summary
        rule = rule_in_cluster(kube, SERVICE, namespace, tmp_path)
        assert rule is not None
        assert {r["labels"]["endpoint"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r} == {GREEN}
        said = service_status_text(ctx)
        assert "pages after go-live: Prometheus and Alertmanager" in said, said
        assert f"{SERVICE} as a whole: Prometheus, its burn rates over both sides (`kimi-ops slo rules {SERVICE}`)" in said
        assert all(s.watched_by.endswith(f"; {SERVICE} as a whole too (its burn rates over both sides)")
                   for s in endpoint_status(ctx, observe=False))
        comment, _ = slo_rules(ctx, SERVICE, monkeypatch)
        assert comment.startswith(f"kimi-ops applies this {rule_object_name(SERVICE)}")
