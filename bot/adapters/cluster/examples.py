"""The rendered manifests of the example release, written to ``deploy/endpoints/`` for readers.

Beside each release manifest: the example endpoint's Prometheus rules with that release live, as the
``PrometheusRule`` kimi-ops applies (``slo.alerting: prometheus``) and as a plain rules file, and the same for
the own rules of a pair service made of two copies of that endpoint.
The release manifests carry the model pods' NetworkPolicies; the example endpoint's HTTPRoute is
written in each admission state (closed, the internal cohort, the first ramp share, open).

``python -m bot.adapters.cluster.examples`` rewrites them; a test fails when
they differ from what the renderer produces now.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.adapters.cluster.cohort import cohort_secret
from bot.adapters.cluster.kube import render_manifest
from bot.adapters.cluster.route import render_route
from bot.adapters.cluster.validate import object_errors
from bot.config import EndpointSettings
from bot.domain import alert_rules
from bot.domain.admission import Admission
from bot.domain.release import ReleaseManifest
from bot.domain.slo import endpoint_objectives
from bot.domain.sweep import Objectives

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_RELEASE = REPO / "deploy" / "releases" / "kimi-k3-2026-08-01.yaml"
EXAMPLE_CONFIG = REPO / "deploy" / "kimi-ops.example.yaml"
OUTPUT = REPO / "deploy" / "endpoints"


def example_endpoints() -> list[EndpointSettings]:
    """The example config's HyperPod endpoint, and the same endpoint on the EKS path."""
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    hyperpod = EndpointSettings.model_validate(config["endpoints"][0])
    eks = hyperpod.model_copy(update={"name": "kimi-k3-eks", "kind": "eks", "reservation_id": "cr-0123456789abcdef0"})
    return [hyperpod, eks]


def example_manifests() -> dict[str, str]:
    """File name → manifest text, with a header naming the release and endpoint."""
    release = ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text(encoding="utf-8")))
    files: dict[str, str] = {}
    for endpoint in example_endpoints():
        manifest = render_manifest(release, endpoint, release.tuple_hash())
        header = (f"# Rendered by kimi-ops for release {release.name} on endpoint {endpoint.name} ({endpoint.kind}).\n"
                  f"# Generated: python -m bot.adapters.cluster.examples. Manifest sha256 {manifest.sha256}\n")
        files[f"{release.name}.{endpoint.kind}.yaml"] = header + manifest.text
    files.update(example_rules(release))
    files.update(example_routes(example_endpoints()[0]))
    return files


def example_routes(endpoint: EndpointSettings) -> dict[str, str]:
    """The endpoint's HTTPRoute in each admission state a deployment moves it through."""
    files: dict[str, str] = {}
    states = [("closed", Admission.closed()), ("internal", Admission.internal()),
              (f"share-{endpoint.ramp.steps[0]}", Admission.share(endpoint.ramp.steps[0])), ("open", Admission.open())]
    for word, admission in states:
        # The token is made when the route closes and kept only in its Secret: the example shows where it comes from.
        placeholder = f"<the token in Secret {cohort_secret(endpoint)}>"
        route = render_route(endpoint, admission, f"example: {admission}", "2026-08-01T00:00:00+00:00", placeholder)
        header = (f"# The HTTPRoute kimi-ops keeps in front of {endpoint.name}, admission {admission}.\n"
                  "# Generated: python -m bot.adapters.cluster.examples.\n")
        files[f"{endpoint.name}.httproute.{word}.yaml"] = header + yaml.safe_dump(route, sort_keys=True)
    return files


def _example_target(endpoint: EndpointSettings, release: str | None, service: str | None = None) -> alert_rules.RuleTarget:
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    traffic = Objectives.model_validate(config.get("traffic_objectives") or {})
    return alert_rules.RuleTarget(
        endpoint=endpoint.name, namespace=endpoint.namespace,
        objectives=endpoint_objectives(endpoint.slo, traffic, endpoint.ttft_objective_ms),
        window_days=endpoint.slo.window_days, min_requests=endpoint.slo.min_requests,
        kv_cache_pressure=endpoint.slo.kv_cache_pressure, gpus=endpoint.gpus, release=release, service=service)


def _rule_files(stem: str, name: str, namespace: str, targets: list[alert_rules.RuleTarget], header: str) -> dict[str, str]:
    labels = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8")).get("prometheus_rule_labels")
    rule_object = alert_rules.prometheus_rule(name, namespace, targets, labels)
    if errors := object_errors(rule_object):
        raise ValueError("; ".join(errors))
    return {f"{stem}.prometheusrule.yaml": header + alert_rules.rules_yaml(rule_object),
            f"{stem}.rules.yaml": header + alert_rules.rules_yaml(alert_rules.rules_file(targets))}


def example_rules(release: ReleaseManifest) -> dict[str, str]:
    """The example endpoint's rules with ``release`` live: the PrometheusRule (CRD-valid) and the rules file; and
    those of a pair service made of two copies of it (``kimi-k3``: blue with users on ``release``, green warm)."""
    endpoint = example_endpoints()[0]
    header = (f"# Prometheus rules kimi-ops renders for endpoint {endpoint.name} with release {release.name} live.\n"
              "# Generated: python -m bot.adapters.cluster.examples (kimi-ops slo rules ENDPOINT prints the same).\n")
    files = _rule_files(release.name, endpoint.name, endpoint.namespace, [_example_target(endpoint, release.name)],
                        header)
    service = "kimi-k3"
    sides = [_example_target(endpoint.model_copy(update={"name": f"{service}-{colour}"}), None, service)
             for colour in ("blue", "green")]
    target = alert_rules.service_target(service, sides, endpoint=sides[0].endpoint, release=release.name)
    header = (f"# The pair service {service}'s own rules (its burn rates over both sides), users on {target.endpoint} "
              f"with release {release.name}.\n# Each side also gets its own rules, as {endpoint.name} does. "
              "Generated: python -m bot.adapters.cluster.examples (kimi-ops slo rules SERVICE prints the same).\n")
    files.update(_rule_files(f"{service}.service", service, endpoint.namespace, [target], header))
    return files


def main() -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    for name, text in example_manifests().items():
        (OUTPUT / name).write_text(text, encoding="utf-8")
        print(OUTPUT / name)


if __name__ == "__main__":
    main()
