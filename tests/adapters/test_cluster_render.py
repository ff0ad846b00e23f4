"""Rendering the example release for HyperPod and EKS, and refusing manifests that break their schemas."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from bot.adapters.cluster import InvalidManifest, render_manifest
from bot.adapters.cluster.examples import OUTPUT, example_manifests
from bot.adapters.cluster.validate import manifest_errors
from bot.config import EndpointSettings, RequestLimits
from bot.domain.release import ReleaseManifest
from bot.domain.rollout import RenderedManifest
from tests.conftest import EXAMPLE_RELEASE


@pytest.fixture()
def release() -> ReleaseManifest:
    return ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text()))


def endpoint(kind: str = "hyperpod", **overrides: Any) -> EndpointSettings:
    data: dict[str, Any] = {
        "name": "kimi-prod", "kind": kind, "namespace": "model-serving", "region": "us-east-1",
        "availability_zone": "us-east-1a",
        "request_limits": RequestLimits(max_concurrent_requests=6, max_queue_size=12, overflow_status_code=503),
    }
    data.update(overrides)
    return EndpointSettings(**data)


def by_kind(manifest: RenderedManifest) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in manifest.objects}


def test_hyperpod_rendering_follows_the_guide_with_s3_weights_a_pinned_image_and_request_limits(release: ReleaseManifest) -> None:
    manifest = render_manifest(release, endpoint(), release.tuple_hash())
    [egress, ingress, iec] = manifest.objects  # the model pods' egress and ingress policies, then the endpoint
    assert egress["kind"] == "NetworkPolicy" and egress["spec"]["policyTypes"] == ["Egress"]
    assert ingress["kind"] == "NetworkPolicy" and ingress["spec"]["policyTypes"] == ["Ingress"]
    assert (iec["apiVersion"], iec["kind"]) == ("inference.sagemaker.aws.amazon.com/v1", "InferenceEndpointConfig")
    assert iec["metadata"]["name"] == "kimi-prod" and iec["metadata"]["namespace"] == "model-serving"
    spec = iec["spec"]
    assert spec["instanceType"] == "ml.p6-b300.48xlarge"
    assert spec["invocationEndpoint"] == "v1/chat/completions"
    assert spec["modelSourceConfig"] == {
        "modelSourceType": "s3",
        "s3Storage": {"bucketName": "acme-model-weights", "region": "us-east-1"},
        "modelLocation": "kimi-k3/3f7c2a9e41d0b85c6a1e9f2d47b03c58e6a9d114",
        "prefetchEnabled": True,
    }
    worker = spec["worker"]
    assert worker["image"] == release.image and "@sha256:" in worker["image"]
    assert worker["args"] == release.serving.args
    assert worker["environmentVariables"] == [{"name": "VLLM_ENABLE_K3_LATENT_MOE_TAIL_FUSION", "value": "1"}]
    assert worker["resources"] == {"requests": {"nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": 8}}
    assert worker["modelVolumeMount"]["mountPath"] == "/opt/ml/model"
    assert worker["requestLimits"] == {"maxConcurrentRequests": 6, "maxQueueSize": 12, "overflowStatusCode": 503}
    assert spec["metrics"]["enabled"] is True
    assert spec["maxDeployTimeInSeconds"] == 3600
    assert iec["metadata"]["labels"]["kimi-ops.io/release"] == "kimi-k3-2026-08-01"
    assert iec["metadata"]["annotations"]["kimi-ops.io/tuple-hash"] == release.tuple_hash()
    assert manifest_errors(manifest.objects) == []


def test_eks_rendering_is_private_isolated_and_pinned_to_the_reserved_node(release: ReleaseManifest) -> None:
    manifest = render_manifest(release, endpoint("eks", reservation_id="cr-0123456789abcdef0"), release.tuple_hash())
    objects = by_kind(manifest)
    assert set(objects) == {"ServiceAccount", "PersistentVolume", "PersistentVolumeClaim", "Deployment", "Service",
                            "PodDisruptionBudget", "NetworkPolicy"}
    account = objects["ServiceAccount"]
    assert account["automountServiceAccountToken"] is False
    assert "eks.amazonaws.com/role-arn" not in account["metadata"]["annotations"]  # no IRSA role: no AWS credentials

    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "kimi-prod" and pod["automountServiceAccountToken"] is False
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "p6-b300.48xlarge",
        "topology.kubernetes.io/zone": "us-east-1a",
        "eks.amazonaws.com/capacityType": "CAPACITY_BLOCK",
    }
    [vllm] = pod["containers"]
    assert vllm["image"] == release.image
    assert vllm["args"] == [*release.serving.args, "--max-num-seqs", "6"]  # the endpoint's concurrency limit
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert vllm["startupProbe"]["httpGet"]["path"] == "/health" and vllm["readinessProbe"]["httpGet"]["path"] == "/health"
    assert not any(e["name"].startswith("AWS_") for e in vllm["env"])

    weights = objects["PersistentVolume"]["spec"]
    assert weights["csi"]["driver"] == "s3.csi.aws.com"
    assert weights["csi"]["volumeAttributes"] == {"bucketName": "acme-model-weights"}
    assert "prefix kimi-k3/3f7c2a9e41d0b85c6a1e9f2d47b03c58e6a9d114/" in weights["mountOptions"]

    assert objects["Service"]["spec"]["type"] == "ClusterIP"
    policy = objects["NetworkPolicy"]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert [p["port"] for rule in policy["egress"] for p in rule["ports"]] == [53, 53]  # DNS only
    assert objects["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    assert manifest_errors(manifest.objects) == []


def test_rendering_is_deterministic_and_stored_text_rebuilds_byte_for_byte(release: ReleaseManifest) -> None:
    first = render_manifest(release, endpoint("eks"), release.tuple_hash())
    again = render_manifest(release, endpoint("eks"), release.tuple_hash())
    assert first.sha256 == again.sha256
    restored = RenderedManifest.from_text(first.text)
    assert restored.sha256 == first.sha256 and restored.objects == first.objects


def test_broken_request_limits_are_refused_with_the_schema_path_of_each_error(release: ReleaseManifest) -> None:
    objects = copy.deepcopy(render_manifest(release, endpoint(), release.tuple_hash()).objects)
    limits = objects[-1]["spec"]["worker"]["requestLimits"]
    limits["maxConcurrentRequests"] = 0
    limits["overflowStatusCode"] = 700
    objects[-1]["spec"]["worker"]["environmentVariables"].append({"name": "VLLM_ENABLE_K3_LATENT_MOE_TAIL_FUSION", "value": "0"})
    objects[-1]["spec"]["replica"] = 2  # a typo the API server would silently prune

    errors = manifest_errors(objects)
    assert errors == [
        "InferenceEndpointConfig/kimi-prod spec: Additional properties are not allowed ('replica' was unexpected)",
        "InferenceEndpointConfig/kimi-prod spec.worker.environmentVariables: "
        "duplicate entry name=VLLM_ENABLE_K3_LATENT_MOE_TAIL_FUSION",
        "InferenceEndpointConfig/kimi-prod spec.worker.requestLimits.maxConcurrentRequests: 0 is less than the minimum of 1",
        "InferenceEndpointConfig/kimi-prod spec.worker.requestLimits.overflowStatusCode: 700 is greater than the maximum of 599",
    ]


def test_an_invalid_eks_object_is_refused_with_its_path(release: ReleaseManifest) -> None:
    objects = copy.deepcopy(render_manifest(release, endpoint("eks"), release.tuple_hash()).objects)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "eight-thousand"
    assert manifest_errors(objects) == [
        "Deployment/kimi-prod spec.template.spec.containers[0].ports[0].containerPort: 'eight-thousand' is not of type 'integer'"
    ]


def test_a_release_serving_another_model_name_than_the_endpoint_expects_is_not_rendered(release: ReleaseManifest) -> None:
    with pytest.raises(InvalidManifest) as refused:
        render_manifest(release, endpoint(served_model_name="kimi-k3-chat"), release.tuple_hash())
    assert refused.value.errors[0].startswith("serving.args --served-model-name: the release serves 'Kimi-K3'")
    assert "nothing was applied" in str(refused.value)


def test_the_example_manifests_in_deploy_endpoints_are_current() -> None:
    """Every object kimi-ops applies for the example: both paths' manifests and the route in each admission state."""
    assert {p.name for p in OUTPUT.glob("*.yaml")} == set(example_manifests()), "run python -m bot.adapters.cluster.examples"
    assert {"kimi-k3-prod.httproute.closed.yaml", "kimi-k3-prod.httproute.internal.yaml",
            "kimi-k3-prod.httproute.open.yaml"} <= set(example_manifests())
    for name, text in example_manifests().items():
        path = OUTPUT / name
        assert path.exists(), f"{path} is missing: run python -m bot.adapters.cluster.examples"
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run python -m bot.adapters.cluster.examples"


def test_limits_accepted_from_a_traffic_gate_are_the_ones_rendered(release: ReleaseManifest) -> None:
    accepted = RequestLimits(max_concurrent_requests=9, max_queue_size=20, overflow_status_code=429)
    [*_, iec] = render_manifest(release, endpoint(accepted_request_limits=accepted), release.tuple_hash()).objects
    limits = iec["spec"]["worker"]["requestLimits"]
    assert (limits["maxConcurrentRequests"], limits["maxQueueSize"]) == (9, 20)


def test_eks_network_policy_lets_kimi_ops_reach_the_api_port(release: ReleaseManifest) -> None:
    policy = by_kind(render_manifest(release, endpoint("eks"), release.tuple_hash()))["NetworkPolicy"]
    sources = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kimi-ops"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kimi-ops"}}} in sources


def test_eks_renders_the_request_limits_as_vllms_max_num_seqs_and_deployment_annotations(release: ReleaseManifest) -> None:
    accepted = RequestLimits(max_concurrent_requests=9, max_queue_size=20, overflow_status_code=429)
    objects = by_kind(render_manifest(release, endpoint("eks", accepted_request_limits=accepted), release.tuple_hash()))
    deployment = objects["Deployment"]
    [vllm] = deployment["spec"]["template"]["spec"]["containers"]
    assert vllm["args"][-2:] == ["--max-num-seqs", "9"]
    annotations = deployment["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k in (
        "kimi-ops.io/max-concurrent-requests", "kimi-ops.io/max-queue-size", "kimi-ops.io/overflow-status-code")} == {
        "kimi-ops.io/max-concurrent-requests": "9", "kimi-ops.io/max-queue-size": "20",
        "kimi-ops.io/overflow-status-code": "429"}
    # A new queue bound is no reason to restart the model: the pod template does not carry it.
    assert "kimi-ops.io/max-queue-size" not in deployment["spec"]["template"]["metadata"]["annotations"]
    assert "kimi-ops.io/max-queue-size" not in objects["Service"]["metadata"]["annotations"]


@pytest.mark.parametrize("pinned", [["--max-num-seqs", "256"], ["--max-num-seqs=256"]])
def test_a_max_num_seqs_in_the_release_gives_way_to_the_endpoints_limit(release: ReleaseManifest, pinned: list[str]) -> None:
    data = release.model_dump(mode="json")
    data["serving"]["args"] = pinned + data["serving"]["args"]
    pinning = ReleaseManifest.model_validate(data)
    deployment = by_kind(render_manifest(pinning, endpoint("eks"), pinning.tuple_hash()))["Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == [*release.serving.args, "--max-num-seqs", "6"]
