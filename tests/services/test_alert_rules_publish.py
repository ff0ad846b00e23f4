"""An endpoint Prometheus watches: its PrometheusRule is applied to the cluster by server-side apply, again after a
go-live or a rollback (the ``release`` label follows), the built-in watch leaves its pages alone, and status says so."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from bot.adapters.cluster.kube import KubernetesCluster
from bot.adapters.cluster.rest import object_path
from bot.adapters.endpoint.openai import HttpEndpointClient
from bot.domain.alert_rules import rule_object_name
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from bot.services.context import Ports
from bot.services.readiness import endpoint_status
from bot.services.scheduling import run_job
from tests.jobs_support import eks_endpoint, make_live

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        seed_cluster(stand_in.rest(), namespace="model-serving")
        yield stand_in


def alert_releases(rule: dict) -> set[str]:
    return {r["labels"]["release"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}


def test_the_rules_follow_the_live_release_and_the_watch_leaves_the_pages_to_prometheus(make_ctx, clock, kube) -> None:
    with OpenAIServer() as server:
        ctx = make_ctx(
            endpoints=[eks_endpoint("kimi-prom", url=server.url, slo={"alerting": "prometheus"}),
                       eks_endpoint("kimi-own", url=server.url)],
            prometheus_rule_labels={"release": "kube-prometheus-stack"},
            ports=Ports(endpoint=HttpEndpointClient(timeout=10),
                        cluster=KubernetesCluster(kube.api_client(), clock=clock)))
        make_live(ctx, "kimi-prom", "rel-a")
        make_live(ctx, "kimi-own", "rel-a")
        rest = kube.rest()
        path = object_path("PrometheusRule", rule_object_name("kimi-prom"), "model-serving")

        for _ in range(14):  # an hour of 10 % 5xx, read every five minutes
            server.simulate(requests=600, errors=60, ttft=0.2, e2e=4.0)
            clock.advance(dt.timedelta(minutes=5))
            run = run_job(ctx, "metrics-watch", trigger="test")
        assert "kimi-prom: not watched (Prometheus watches it)" in run.summary
        with ctx.uow() as uow:
            open_kinds = {row.name: [i.kind for i in uow.incidents.open_of(row.id, ["burn-page:errors"])]
                          for row in uow.endpoints.list()}
        assert open_kinds == {"kimi-prom": [], "kimi-own": ["burn-page:errors"]}  # the same traffic: one pages here

        rule = rest.get(path)
        assert rule is not None and alert_releases(rule) == {"rel-a"}
        assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert rest.get(object_path("PrometheusRule", rule_object_name("kimi-own"), "model-serving")) is None
        version = rule["metadata"]["resourceVersion"]
        run_job(ctx, "metrics-watch", trigger="test")
        assert rest.get(path)["metadata"]["resourceVersion"] == version  # unchanged: not applied again

        make_live(ctx, "kimi-prom", "rel-b")  # a go-live (a rollback records a live deployment the same way)
        run = run_job(ctx, "metrics-watch", trigger="test")
        assert "kimi-prom: Prometheus rules applied (rel-b)" in run.summary
        assert alert_releases(rest.get(path)) == {"rel-b"}
        assert rest.get(path)["metadata"]["managedFields"][0]["manager"] == "kimi-ops"

        [prom] = endpoint_status(ctx, "kimi-prom", observe=False)
        [own] = endpoint_status(ctx, "kimi-own", observe=False)
        assert prom.watched_by.startswith("Prometheus and Alertmanager") and own.watched_by.startswith("kimi-ops's")


def test_kimi_ops_slo_rules_prints_what_kimi_ops_applies(make_ctx, monkeypatch, tmp_path) -> None:
    import yaml
    from typer.testing import CliRunner

    from bot.cli.main import app
    from tests.promtool_support import check_rules

    ctx = make_ctx(endpoints=[eks_endpoint("kimi-blue"), eks_endpoint("kimi-green")],
                   services=[{"name": "kimi", "sides": ["kimi-blue", "kimi-green"],
                              "route": {"gateway": {"name": "gw", "namespace": "gateways"}}}])
    make_live(ctx, "kimi-blue", "rel-a")
    monkeypatch.setattr("bot.cli.slo_rules.context", lambda: ctx)
    monkeypatch.setattr("bot.cli.jobs.context", lambda: ctx)
    runner = CliRunner()
    shown = runner.invoke(app, ["slo", "rules", "kimi"])
    assert shown.exit_code == 0, shown.output
    rule = yaml.safe_load(shown.output)
    assert rule["kind"] == "PrometheusRule" and rule["metadata"]["name"] == "kimi-ops-slo-kimi"
    alerts = [r["labels"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert {(a["endpoint"], a["release"], a["service"]) for a in alerts} == {("kimi-blue", "rel-a", "kimi"),
                                                                              ("kimi-green", "none", "kimi")}
    plain = runner.invoke(app, ["slo", "rules", "kimi-blue", "--as", "rules-file"])
    assert plain.exit_code == 0 and "groups" in yaml.safe_load(plain.output)
    (tmp_path / "rules.yaml").write_text(plain.output)
    check_rules(tmp_path / "rules.yaml")
    unknown = runner.invoke(app, ["slo", "rules", "kimi-purple"])
    assert unknown.exit_code == 1 and "no endpoint or service named kimi-purple" in unknown.output
    assert "Traceback" not in unknown.output
    assert runner.invoke(app, ["slo", "kimi-blue"]).exit_code == 0  # the objectives, as before
