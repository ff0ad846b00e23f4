"""A pair service has one watcher after go-live, as a platform engineer sees it.

With ``slo.alerting: prometheus`` on one side only, the setting waits: kimi-ops's metrics watch keeps both sides'
pages (the side set to Prometheus included, whose page still comes once), kimi-ops applies neither side's rules
nor the service's, an Alertmanager alert about that side opens nothing, and ``/kimi status SERVICE``, each side's
status and ``kimi-ops slo rules`` say which setting waits for which side. Once both sides have it (the settings
changed, kimi-ops restarted), the next round applies both sides' rules and the service's own, the built-in watch
leaves them to Prometheus, and status and ``slo rules`` say so. Every rule object in the emulator passes promtool.
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
from bot.domain.alertmanager import WebhookNotification
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.openai_server import OpenAIServer
from bot.services.access import Identity
from bot.services.alert_intake import receive_notification
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
BURN = "burn-page:errors"


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


def open_burns(ctx: Context) -> dict[str, list[str]]:
    with ctx.uow() as uow:
        return {row.name: [i.kind for i in uow.incidents.open_of(row.id, [BURN])] for row in uow.endpoints.list()}


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


def slo_rules_note(ctx: Context, name: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The comment ``kimi-ops slo rules NAME`` prints above the rules (joined), the rules being a PrometheusRule."""
    monkeypatch.setattr("bot.cli.slo_rules.context", lambda: ctx)
    shown = CliRunner().invoke(app, ["slo", "rules", name])
    assert shown.exit_code == 0, shown.output
    assert yaml.safe_load(shown.output)["metadata"]["name"] == rule_object_name(name)  # what it would apply
    return " ".join(line[2:] for line in shown.output.splitlines() if line.startswith("# "))


def alertmanager_fires(ctx: Context, endpoint: str) -> list[str]:
    """A firing burn alert about ``endpoint`` reaching the webhook's intake: what it ignored."""
    notification = WebhookNotification.model_validate({
        "version": "4", "status": "firing", "alerts": [{
            "status": "firing", "fingerprint": "a1b2c3d4e5f60718",
            "labels": {"alertname": "KimiOpsErrorBudgetBurn", "endpoint": endpoint, "kimi_ops_kind": BURN,
                       "severity": "page", "objective": "errors"},
            "annotations": {"description": "errors: 10% of requests bad"}}]})
    return receive_notification(ctx, notification).ignored


def test_a_pair_has_one_watcher_and_a_side_s_prometheus_setting_waits_for_the_other_side(
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
        users_on(ctx, BLUE)  # users on the side set to Prometheus

        # An hour of 10 % 5xx, read every five minutes: kimi-ops's watch pages for it, as for any side it keeps.
        for _ in range(14):
            server.simulate(requests=600, errors=60, ttft=0.2, e2e=4.0)
            clock.advance(dt.timedelta(minutes=5))
            run = run_job(ctx, "metrics-watch", trigger="test")
        assert f"{BLUE}: sampled" in run.summary, run.summary
        assert open_burns(ctx) == {BLUE: [BURN], GREEN: []}
        # Prometheus was given no rules to page with, and an alert about the side (a rule of the platform's own, one
        # left from before) opens nothing: one page per burn.
        assert [rule_in_cluster(kube, name, namespace, tmp_path) for name in (BLUE, GREEN, SERVICE)] == [None] * 3
        assert alertmanager_fires(ctx, BLUE) == [
            f"{BLUE} {BURN} (kimi-ops's own watch pages for it: its slo.alerting: prometheus waits for the other side "
            "of its service to have it too)"]
        assert open_burns(ctx) == {BLUE: [BURN], GREEN: []}

        said = service_status_text(ctx)
        assert (f"pages after go-live: kimi-ops's metrics watch (built in), for both sides, each judged alone; "
                f"{BLUE}'s `slo.alerting: prometheus` takes effect once {GREEN} has it too (a service has one "
                "watcher)") in said, said
        sides = {s.name: s.watched_by for s in endpoint_status(ctx, observe=False)}
        assert sides[BLUE] == (f"kimi-ops's metrics watch (built in): its `slo.alerting: prometheus` takes effect "
                               f"once {GREEN}, the other side of {SERVICE}, has it too (a service has one watcher)")
        assert sides[GREEN] == (f"kimi-ops's metrics watch (built in); {BLUE}'s `slo.alerting: prometheus` waits "
                                "for this side to have it too (a service has one watcher)")
        assert slo_rules_note(ctx, SERVICE, monkeypatch).startswith(
            f"Not applied: {SERVICE}'s pages after go-live come from kimi-ops's metrics watch (built in), for both "
            f"sides, each judged alone; {BLUE}'s `slo.alerting: prometheus` takes effect once {GREEN} has it too")
        assert slo_rules_note(ctx, BLUE, monkeypatch).startswith(
            f"Not applied: {BLUE}'s pages come from kimi-ops's metrics watch: its `slo.alerting: prometheus` takes "
            f"effect once {GREEN}")
        assert slo_rules_note(ctx, GREEN, monkeypatch).startswith(
            f"Not applied: {GREEN}'s pages come from kimi-ops's metrics watch (slo.alerting: builtin)")

        # The platform team sets the other side too; kimi-ops restarts with the new settings.
        ctx = make_ctx(**settings("prometheus"))
        run = run_job(ctx, "metrics-watch", trigger="test")
        assert f"{BLUE}: not watched (Prometheus watches it)" in run.summary, run.summary
        for name in (BLUE, GREEN, SERVICE):
            assert f"{name}: Prometheus rules applied" in run.summary, run.summary
            assert rule_in_cluster(kube, name, namespace, tmp_path) is not None
        said = service_status_text(ctx)
        assert (f"pages after go-live: Prometheus and Alertmanager, for each side and for {SERVICE} as a whole (its "
                f"burn rates over both sides: `kimi-ops slo rules {SERVICE}`)") in said, said
        sides = {s.name: s.watched_by for s in endpoint_status(ctx, observe=False)}
        assert sides[BLUE].startswith("Prometheus and Alertmanager (kimi-ops applies the rules")
        assert sides[BLUE].endswith(f"; and {SERVICE} as a whole, with {GREEN} (its burn rates over both sides)")
        for name in (BLUE, SERVICE):
            assert slo_rules_note(ctx, name, monkeypatch).startswith(f"kimi-ops applies this {rule_object_name(name)}")
