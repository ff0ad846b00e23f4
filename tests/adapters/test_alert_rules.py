"""The Prometheus rules kimi-ops renders: valid ``PrometheusRule`` objects under the real CRD, and rules files the
real ``promtool check rules`` accepts (the firing behaviour is in tests/services/test_alert_rules_agree.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from bot.adapters.cluster.examples import OUTPUT, example_rules
from bot.adapters.cluster.validate import RULE_SCHEMA_FILE, object_errors, rule_schema_document
from bot.domain import alert_rules, slo
from bot.domain.release import ReleaseManifest
from tests.conftest import EXAMPLE_RELEASE
from tests.promtool_support import check_rules, write_yaml

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "deploy" / "crds" / "monitoring.coreos.com_prometheusrules.yaml"


def _stripped(node: object) -> object:
    if isinstance(node, dict):
        return {k: _stripped(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_stripped(v) for v in node]
    return node


def target(**changes: object) -> alert_rules.RuleTarget:
    objectives = slo.resolve(slo.SloSettings(), ttft_p99_ms=2000, completion_p99_ms=30_000, error_rate=0.01,
                             reject_rate=0.01)
    values: dict = {"endpoint": "kimi-blue", "namespace": "model-serving", "objectives": objectives, "window_days": 7,
                    "min_requests": 20, "kv_cache_pressure": 0.95, "gpus": 8, "release": "kimi-k3-2026-08-01"}
    values.update(changes)
    return alert_rules.RuleTarget(**values)


def test_the_shipped_schema_is_the_prometheus_operator_crd_s() -> None:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["metadata"]["name"] == "prometheusrules.monitoring.coreos.com"
    served = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    assert rule_schema_document()["openAPIV3Schema"] == _stripped(served["schema"]["openAPIV3Schema"])
    assert "prometheus-operator" in (CRD.parent / "SOURCE.md").read_text() and RULE_SCHEMA_FILE


def test_a_pair_s_rules_are_a_valid_prometheus_rule_and_a_broken_one_is_refused() -> None:
    sides = [target(service="kimi"), target(endpoint="kimi-green", service="kimi", release=None)]
    rule = alert_rules.prometheus_rule("kimi", "model-serving", sides, {"release": "kube-prometheus-stack"})
    assert object_errors(rule) == []
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert {a["labels"]["release"] for a in alerts} == {"kimi-k3-2026-08-01", "none"}
    assert {a["labels"]["service"] for a in alerts} == {"kimi"}
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["for"] = "five minutes"
    del broken["spec"]["groups"][1]["rules"][0]["expr"]
    errors = object_errors(broken)
    assert any("groups[0].rules[0].for" in e for e in errors) and any("'expr' is a required property" in e for e in errors)
    twice = copy.deepcopy(rule)
    twice["spec"]["groups"][1]["name"] = twice["spec"]["groups"][0]["name"]
    assert any("duplicate entry name=" in e for e in object_errors(twice))


def test_every_rule_and_alert_the_watch_pages_on_is_rendered() -> None:
    groups = alert_rules.rule_groups(target())
    kinds = {r["labels"][alert_rules.KIND_LABEL] for g in groups for r in g["rules"] if "alert" in r}
    assert kinds == {f"burn-{s}:{o}" for s in ("page", "warn") for o in slo.OBJECTIVES} | {
        "kv-pressure", "gpu", "node", "crashloop"}


@pytest.mark.parametrize("rendered", ["example", "pair", "service", "service-selectors", "selector", "odd-bounds"])
def test_promtool_checks_every_rendered_rules_file(rendered: str, tmp_path: Path) -> None:
    if rendered == "example":
        release = ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text()))
        paths = [OUTPUT / name for name in example_rules(release)]
        for path in paths:  # the PrometheusRule's spec is a rules file too
            document = yaml.safe_load(path.read_text())
            check_rules(write_yaml(tmp_path / path.name, document.get("spec", document)))
        return
    if rendered == "pair":
        targets = [target(service="kimi"), target(endpoint="kimi-green", service="kimi")]
    elif rendered.startswith("service"):  # a pair's own rules beside its sides' (group names must not clash)
        selectors = ['job="kimi-blue"', 'job="kimi-green"'] if rendered == "service-selectors" else [None, None]
        sides = [target(service="kimi", selector=selectors[0]),
                 target(endpoint="kimi-green", service="kimi", selector=selectors[1])]
        targets = [*sides, alert_rules.service_target("kimi", sides, endpoint="kimi-green", release="rel-b")]
    elif rendered == "selector":
        targets = [target(selector='job="kimi-blue", cluster="prod"')]
    else:  # bounds on a bucket edge, below the first bucket and past the last one; a 30-day budget
        objectives = slo.resolve(slo.SloSettings(queue_p99_ms=0.5, e2e_p99_ms=9_000_000), ttft_p99_ms=2500,
                                 completion_p99_ms=1, error_rate=0.001, reject_rate=0.2)
        targets = [target(objectives=objectives, window_days=30)]
    check_rules(write_yaml(tmp_path / "rules.yaml", alert_rules.rules_file(targets)))


def test_an_interpolated_bound_reads_the_buckets_around_it() -> None:
    ttft = slo.Objective("ttft", 2000, 0.01)
    good = alert_rules.good_rate(ttft, 'job="x"', "5m")
    assert 'le=~"1|1.0"' in good and 'le=~"2.5"' in good and "* 0.666667" in good  # 2 s is 2/3 of the way to 2.5 s
    edge = alert_rules.good_rate(slo.Objective("ttft", 2500, 0.01), 'job="x"', "5m")
    assert edge == 'sum(rate(vllm:time_to_first_token_seconds_bucket{job="x", le=~"2.5"}[5m]))'


def test_a_pair_s_own_rules_read_both_sides_and_keep_the_stricter_objective() -> None:
    strict = slo.resolve(slo.SloSettings(), ttft_p99_ms=1000, completion_p99_ms=30_000, error_rate=0.005,
                         reject_rate=0.01)
    sides = [target(service="kimi", selector='job="kimi-blue"'),
             target(endpoint="kimi-green", service="kimi", objectives=strict, min_requests=50, release=None)]
    service = alert_rules.service_target("kimi", sides, endpoint="kimi-blue", release="kimi-k3-2026-08-01")
    assert {o.name: (o.bound, o.budget) for o in service.objectives}["ttft"] == (1000, 0.01)
    assert {o.name: o.budget for o in service.objectives}["errors"] == 0.005 and service.min_requests == 20
    groups = alert_rules.rule_groups(service)
    assert [g["name"] for g in groups] == ["kimi-ops.kimi.slo-recording", "kimi-ops.kimi.alerts"]
    record = groups[0]["rules"][0]
    assert record["labels"] == {"service": "kimi", "objective": "ttft"}  # no endpoint: the sides' sum
    assert '{job="kimi-blue", le=~' in record["expr"] and ' or rate(' in record["expr"]
    assert '{namespace="model-serving", pod=~"kimi-green-.*", le=~' in record["expr"]
    alerts = [r for r in groups[1]["rules"]]
    assert {a["labels"][alert_rules.KIND_LABEL] for a in alerts} == {
        f"burn-{s}:{o}" for s in ("page", "warn") for o in slo.OBJECTIVES}  # the direct pages stay the sides'
    assert all('endpoint=""' in a["expr"] and a["labels"][alert_rules.SCOPE_LABEL] == "service"
               and a["labels"]["endpoint"] == "kimi-blue" for a in alerts)
    rule = alert_rules.prometheus_rule("kimi", "model-serving", [service])
    assert object_errors(rule) == [] and rule["metadata"]["labels"]["kimi-ops.io/release"] == "kimi-k3-2026-08-01"
