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
from bot.services.alert_rules import REASSERT_AFTER, apply_after_go_live
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

        rest.delete(path)  # by hand: the rendering is unchanged, so only the next assertion brings it back
        clock.advance(REASSERT_AFTER)
        run = run_job(ctx, "metrics-watch", trigger="test")
        assert ("kimi-prom: Prometheus rules applied again (rel-b): the cluster's copy was missing or edited"
                in run.summary)
        assert alert_releases(rest.get(path)) == {"rel-b"}
        version = rest.get(path)["metadata"]["resourceVersion"]
        clock.advance(REASSERT_AFTER)
        run = run_job(ctx, "metrics-watch", trigger="test")
        assert "kimi-prom: Prometheus rules" not in run.summary  # intact: asserted again, nothing changed or said
        assert rest.get(path)["metadata"]["resourceVersion"] == version

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
    # Both sides on the built-in watch: the comment above says these are not applied, and who pages instead.
    note = " ".join(line[2:] for line in shown.output.splitlines() if line.startswith("# "))
    assert note == "Not applied: kimi's pages after go-live come from kimi-ops's metrics watch (built in), for both " \
                   "sides, each judged alone.", shown.output[:300]
    alerts = [r["labels"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    # The service's own burn rates, paging the side users are on (blue: live, admission open) with its release.
    assert {(a["endpoint"], a["release"], a["service"], a["kimi_ops_scope"]) for a in alerts} == {
        ("kimi-blue", "rel-a", "kimi", "service")}
    assert {a["kimi_ops_kind"] for a in alerts} == {f"burn-{s}:{o}" for s in ("page", "warn")
                                                    for o in ("ttft", "queue", "e2e", "errors", "rejects")}
    side = yaml.safe_load(runner.invoke(app, ["slo", "rules", "kimi-blue"]).output)
    assert {r["labels"]["release"] for g in side["spec"]["groups"] for r in g["rules"] if "alert" in r} == {"rel-a"}
    plain = runner.invoke(app, ["slo", "rules", "kimi-blue", "--as", "rules-file"])
    assert plain.exit_code == 0 and "groups" in yaml.safe_load(plain.output)
    (tmp_path / "rules.yaml").write_text(plain.output)
    check_rules(tmp_path / "rules.yaml")
    unknown = runner.invoke(app, ["slo", "rules", "kimi-purple"])
    assert unknown.exit_code == 1 and "no endpoint or service named kimi-purple" in unknown.output
    assert "Traceback" not in unknown.output
    assert runner.invoke(app, ["slo", "kimi-blue"]).exit_code == 0  # the objectives, as before


def test_a_pair_s_own_rules_page_the_side_users_are_on_and_follow_them(make_ctx, clock, kube) -> None:
    ctx = make_ctx(
        endpoints=[eks_endpoint(side, slo={"alerting": "prometheus"}) for side in ("kimi-blue", "kimi-green")],
        services=[{"name": "kimi", "sides": ["kimi-blue", "kimi-green"],
                   "route": {"gateway": {"name": "gw", "namespace": "gateways"}}}],
        ports=Ports(cluster=KubernetesCluster(kube.api_client(), clock=clock)))
    rest = kube.rest()
    path = object_path("PrometheusRule", rule_object_name("kimi"), "model-serving")

    def users_on(side: str, release: str) -> int:
        """What a side's go-live records: its live deployment, every user on it, none on the other side."""
        dep = make_live(ctx, side, release)
        with ctx.uow() as uow:
            for row in uow.endpoints.list():
                if row.name in ("kimi-blue", "kimi-green"):
                    row.admission = "open" if row.name == side else "closed"
            uow.commit()
        return dep

    def paged() -> set[tuple[str, str]]:
        rule = rest.get(path)
        assert rule is not None
        return {(r["labels"]["endpoint"], r["labels"]["release"]) for g in rule["spec"]["groups"] for r in g["rules"]
                if "alert" in r}

    blue = users_on("kimi-blue", "rel-a")
    said = apply_after_go_live(ctx, "kimi-blue", blue)  # what the ramp does once the side is live
    assert said == ["kimi-blue: Prometheus rules applied (rel-a)", "kimi: Prometheus rules applied (rel-a)"]
    assert paged() == {("kimi-blue", "rel-a")}
    assert rest.get(object_path("PrometheusRule", rule_object_name("kimi-green"), "model-serving")) is None

    users_on("kimi-green", "rel-b")  # a go-live recorded by another replica: the round is the safety net
    run = run_job(ctx, "metrics-watch", trigger="test")
    assert "kimi: Prometheus rules applied (rel-b)" in run.summary and paged() == {("kimi-green", "rel-b")}

    users_on("kimi-blue", "rel-a")  # `/kimi rollback kimi`: every user back on blue, then its rules
    apply_after_go_live(ctx, "kimi-blue")
    assert paged() == {("kimi-blue", "rel-a")}
    alerts = [r for g in rest.get(path)["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert {a["labels"]["kimi_ops_scope"] for a in alerts} == {"service"}
    assert all(not a["labels"]["kimi_ops_kind"].startswith(("gpu", "node", "crashloop", "kv")) for a in alerts)
