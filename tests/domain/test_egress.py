"""The HyperPod model pods' egress: named destinations only, required on production, checked by ``pods.boundary``.

The guide limits model-pod egress to weight storage, telemetry and the control
plane. The settings name each (the S3 interface VPC endpoint, the telemetry
collector, the EKS API endpoint); the render emits exactly those beside kube-dns,
and the infrastructure gate's check inspects the same rules.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.adapters.cluster.render import render_objects
from bot.adapters.cluster.validate import manifest_errors
from bot.config import ConfigError, EndpointSettings, load_settings
from bot.domain.egress import EgressPolicy, TelemetryEgress, pod_boundary_check
from bot.sandbox.stack import SANDBOX_DOOR, SANDBOX_EGRESS
from tests.artifact_support import example_manifest

EGRESS = {
    "weights_cidrs": ["10.0.64.0/24"],
    "telemetry": {"namespace": "hyperpod-observability", "pod_labels": {"app.kubernetes.io/name": "otel-collector"},
                  "cidrs": ["10.0.80.16/28"]},
    "control_plane_cidrs": ["10.0.0.0/26"],
}
ENV = ["VLLM_ENABLE_K3_LATENT_MOE_TAIL_FUSION"]


def egress_policy(endpoint: EndpointSettings) -> dict[str, Any]:
    objects = render_objects(example_manifest(), endpoint, "0" * 64)
    assert manifest_errors(objects) == []
    return next(o for o in objects if o["kind"] == "NetworkPolicy")


def test_the_model_pods_reach_only_kube_dns_the_weights_telemetry_and_the_control_plane() -> None:
    policy = egress_policy(EndpointSettings(name="kimi-prod", egress=EGRESS))
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {"app": "kimi-prod"}}  # the operator's label on its pods
    assert spec["policyTypes"] == ["Egress"]
    dns, weights, telemetry, control_plane = spec["egress"]
    assert dns == {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                           "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                   "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    assert weights == {"to": [{"ipBlock": {"cidr": "10.0.64.0/24"}}], "ports": [{"protocol": "TCP", "port": 443}]}
    assert telemetry == {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "hyperpod-observability"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "otel-collector"}}},
               {"ipBlock": {"cidr": "10.0.80.16/28"}}],
        "ports": [{"protocol": "TCP", "port": 4317}, {"protocol": "TCP", "port": 4318}],
    }
    assert control_plane == {"to": [{"ipBlock": {"cidr": "10.0.0.0/26"}}], "ports": [{"protocol": "TCP", "port": 443}]}

    check = pod_boundary_check(ENV, "hyperpod", "prod", EgressPolicy.model_validate(EGRESS))
    assert check.status == "pass"
    assert check.reason == (
        "no AWS credentials in the pods; NetworkPolicy lets out only DNS (kube-dns), weights S3 10.0.64.0/24 and "
        "control plane 10.0.0.0/26 on TCP 443, telemetry namespace hyperpod-observability pods "
        "app.kubernetes.io/name=otel-collector and 10.0.80.16/28 on TCP 4317,4318"
    )
    carried = pod_boundary_check(["AWS_ACCESS_KEY_ID", "HF_TOKEN"], "hyperpod", "prod", EgressPolicy.model_validate(EGRESS))
    assert carried.status == "fail" and "AWS_ACCESS_KEY_ID" in carried.reason


def test_a_production_hyperpod_endpoint_without_named_egress_does_not_start(tmp_path: Any) -> None:
    endpoint = {"name": "kimi-prod", "kind": "hyperpod", "environment": "prod"}
    with pytest.raises(ConfigError) as refused:
        load_settings(data_dir=tmp_path, endpoints=[endpoint])
    assert str(refused.value) == (
        "KIMI_CONFIG: endpoint kimi-prod (HyperPod, prod) must name where its model pods may connect: egress: "
        "weights_cidrs (the S3 interface VPC endpoint's addresses), telemetry (the collector's namespace: or cidrs:) "
        "and control_plane_cidrs (the EKS API endpoint's addresses); see deploy/kimi-ops.example.yaml"
    )
    # Named, it starts; an EKS or a staging endpoint needs none.
    load_settings(data_dir=tmp_path, endpoints=[{**endpoint, "egress": SANDBOX_EGRESS, "door": SANDBOX_DOOR},
                                                {"name": "kimi-eks", "kind": "eks", "environment": "prod", "door": SANDBOX_DOOR},
                                                {"name": "kimi-stage", "kind": "hyperpod", "environment": "staging"}])


def test_without_named_egress_a_staging_endpoint_is_open_but_for_the_credential_addresses_and_warned() -> None:
    policy = egress_policy(EndpointSettings(name="kimi-stage", environment="staging"))
    [_, https] = policy["spec"]["egress"]
    assert https["to"] == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32", "169.254.170.23/32"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128", "fd00:ec2::23/128"]}},
    ]
    warned = pod_boundary_check(ENV, "hyperpod", "staging", None)
    assert warned.status == "warn" and "name egress: weights_cidrs" in warned.reason
    # A production endpoint that got this far without it (settings read before this rule) fails the gate.
    assert pod_boundary_check(ENV, "hyperpod", "prod", None).status == "fail"
    assert pod_boundary_check(ENV, "eks", "prod", None).status == "pass"


@pytest.mark.parametrize(("egress", "words"), [
    ({**EGRESS, "weights_cidrs": ["0.0.0.0/0"]}, "0.0.0.0/0 is wider than /8: name the endpoint's own addresses"),
    ({**EGRESS, "control_plane_cidrs": ["169.254.0.0/16"]}, "contains 169.254.169.254/32 (instance metadata)"),
    ({**EGRESS, "weights_cidrs": ["the S3 endpoint"]}, "'the S3 endpoint' is not a CIDR block such as 10.0.0.0/16"),
    ({**EGRESS, "weights_cidrs": []}, "at least 1 item"),
    ({**EGRESS, "telemetry": {"ports": [4317]}}, "telemetry: name the collector's namespace: (and pod_labels:) or its cidrs:"),
    ({k: v for k, v in EGRESS.items() if k != "control_plane_cidrs"}, "control_plane_cidrs\n  Field required"),
])
def test_egress_that_would_not_limit_anything_is_refused_with_the_reason(egress: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        EndpointSettings(name="kimi-prod", egress=egress)
    assert words in str(refused.value)


def test_the_replaced_egress_cidrs_setting_says_what_replaced_it() -> None:
    with pytest.raises(ValueError, match="egress_cidrs was replaced by egress: weights_cidrs"):
        EndpointSettings(name="kimi-prod", egress_cidrs=["10.0.0.0/8"])
    # Endpoint rows stored before carry the old default, which means nothing: they still read.
    assert EndpointSettings.model_validate({"name": "kimi-prod", "egress_cidrs": ["0.0.0.0/0"]}).egress is None


def test_the_check_fails_rules_that_are_open_even_if_the_settings_were_not_validated() -> None:
    # model_construct skips validation, as a hand-built or stale object might: the check reads the rules themselves.
    loose = EgressPolicy.model_construct(weights_cidrs=["0.0.0.0/0"], control_plane_cidrs=["10.0.0.0/26"],
                                         telemetry=TelemetryEgress.model_construct(namespace=None, pod_labels={},
                                                                                   cidrs=[], ports=[4317]))
    check = pod_boundary_check(ENV, "hyperpod", "prod", loose)
    assert check.status == "fail"
    assert "rule 2: 0.0.0.0/0 is wider than /8" in check.reason and "rule 3 allows every destination" in check.reason
