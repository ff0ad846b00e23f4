"""The deployment applies its Prometheus rules: the ``release`` label follows a go-live and a rollback at once.

On the sandbox's real parts (the kmock Kubernetes emulator with the HyperPod operator simulator, the production
engine), for an endpoint with ``slo.alerting: prometheus``: no metrics-watch round runs here, so the rule object in
the cluster can only come from the deployment itself. A cluster that refuses the rules leaves the go-live standing,
says so in the deployment's thread and in the audit, and the next metrics-watch round applies them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from bot.adapters.cluster.kube import KubernetesCluster
from bot.adapters.cluster.rest import object_path
from bot.domain.alert_rules import rule_object_name
from bot.sandbox.kube import seed_cluster, start_kube
from bot.sandbox.stack import DEPLOYER, ENDPOINT, NAMESPACE
from bot.services.access import Identity
from bot.services.alert_rules import apply_after_go_live
from bot.services.context import Ports
from bot.services.deployments import get_deployment, request_rollback
from bot.services.scheduling import run_job
from tests.conftest import with_ports
from tests.exposure_support import World, start_world
from tests.jobs_support import eks_endpoint, make_live
from tests.promtool_support import free_port

pytestmark = pytest.mark.timeout(600)
RULE = object_path("PrometheusRule", rule_object_name(ENDPOINT), NAMESPACE)


def alert_releases(rule: dict[str, Any] | None) -> set[str]:
    assert rule is not None, "no PrometheusRule in the cluster"
    return {r["labels"]["release"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}


@pytest.fixture()
def world(tmp_path: Path) -> Iterator[World]:
    w = start_world(tmp_path / "sandbox", users_per_second=0, ramp={"steps": [], "soak_seconds": 0},
                    slo={"alerting": "prometheus"})
    try:
        yield w
    finally:
        w.sandbox.stop()


def test_the_deployment_applies_the_rules_of_each_release_it_makes_live(world: World) -> None:
    older, newer = world.releases
    rest = world.sandbox.stand_ins["kube"].rest()
    assert rest.get(RULE) is None  # nothing has gone live yet; no metrics-watch round runs in this test

    first = world.deploy(older)
    assert first.state == "live" and alert_releases(rest.get(RULE)) == {older}
    second = world.deploy(newer)
    assert second.state == "live" and alert_releases(rest.get(RULE)) == {newer}
    assert rest.get(RULE)["metadata"]["labels"]["kimi-ops.io/release"] == newer

    view = world.engine.advance(request_rollback(world.ctx, ENDPOINT, Identity(DEPLOYER)).id)
    view = world.approve(view.id, until="live")
    assert view.kind == "rollback" and view.release == older
    assert alert_releases(rest.get(RULE)) == {older}  # the rolled-back-to release, before any round
    with world.ctx.uow() as uow:
        applied = [(d["rule"], d["release"]) for _, _, _, d in uow.audit.actions(f"deployment:{view.id}",
                                                                                 "alert_rules.applied")]
    assert applied == [(rule_object_name(ENDPOINT), older)]


def test_a_refused_rule_leaves_the_go_live_standing_is_said_and_the_next_round_applies_it(make_ctx, clock) -> None:
    dead = k8s.Configuration()
    dead.host = f"http://127.0.0.1:{free_port()}"  # nothing listens: every apply is refused at the connection
    dead.retries = 0
    ctx = make_ctx(endpoints=[eks_endpoint("kimi-refused", slo={"alerting": "prometheus"})],
                   ports=Ports(cluster=KubernetesCluster(k8s.ApiClient(dead), clock=clock)))
    dep = make_live(ctx, "kimi-refused", "rel-b")

    said = apply_after_go_live(ctx, "kimi-refused", dep)
    assert len(said) == 1 and said[0].startswith("kimi-refused: Prometheus rules not applied (")
    assert get_deployment(ctx, dep).state == "live"
    with ctx.uow() as uow:
        audited = uow.audit.actions(f"deployment:{dep}", "alert_rules.not_applied")
        events = [e.payload["text"] for e in uow.events.for_deployment(dep) if e.kind == "alert_rules.not_applied"]
    assert [d["rule"] for _, _, _, d in audited] == [rule_object_name("kimi-refused")]
    assert len(events) == 1 and "the next metrics-watch round applies the rules again" in events[0]

    with start_kube() as kube:  # the API server answers again: the round is the retry
        seed_cluster(kube.rest(), namespace="model-serving")
        run = run_job(with_ports(ctx, cluster=KubernetesCluster(kube.api_client(), clock=clock)), "metrics-watch",
                      trigger="test")
        assert "kimi-refused: Prometheus rules applied (rel-b)" in run.summary
        assert alert_releases(kube.rest().get(object_path("PrometheusRule", rule_object_name("kimi-refused"),
                                                          "model-serving"))) == {"rel-b"}


class RefusingRules:
    """A cluster port whose admission webhook refuses every rule object, with outside words in its message."""

    def apply_rules(self, endpoint: Any, rule_object: dict[str, Any]) -> bool:
        raise RuntimeError('admission webhook "policy.example" denied the request: <!channel> see <https://x|y>')


def test_the_clusters_refusal_reaches_the_thread_as_typed_never_as_a_channel_ping(make_ctx) -> None:
    ctx = make_ctx(endpoints=[eks_endpoint("kimi-refused", slo={"alerting": "prometheus"})],
                   ports=Ports(cluster=RefusingRules()))  # type: ignore[arg-type]
    dep = make_live(ctx, "kimi-refused", "rel-b")

    apply_after_go_live(ctx, "kimi-refused", dep)
    with ctx.uow() as uow:
        [said] = [e.payload["text"] for e in uow.events.for_deployment(dep) if e.kind == "alert_rules.not_applied"]
        [audited] = [d["reason"] for _, _, _, d in uow.audit.actions(f"deployment:{dep}", "alert_rules.not_applied")]
    assert "denied the request: &lt;!channel&gt; see &lt;https://x|y&gt;" in said
    assert "<!channel>" not in said and "<https://" not in said
    assert "<!channel>" in audited  # the audit keeps the words as they came
