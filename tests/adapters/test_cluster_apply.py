"""The cluster adapter's writes against kmock's Kubernetes emulator over HTTP, with a simulated HyperPod operator:
server-side apply (idempotent, conflicts, refusals, a stored manifest restored exactly), admission in the
ConfigMap, and each endpoint served by the cluster of its context.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client

from bot.adapters.cluster import (
    ClusterError,
    ContextClusters,
    InvalidManifest,
    KubernetesCluster,
)
from bot.adapters.cluster.kube import ADMISSION_ANNOTATION
from bot.adapters.cluster.rest import object_path
from bot.config import EndpointSettings
from bot.domain.release import ReleaseManifest
from bot.domain.rollout import RenderedManifest
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from tests.cluster_support import NS, endpoint, other_release
from tests.cluster_support import cluster as cluster
from tests.cluster_support import kube as kube
from tests.cluster_support import release as release
from tests.cluster_support import seeded as seeded
from tests.conftest import START


def main_object(kube: KubeStandIn, ep: EndpointSettings) -> dict[str, Any] | None:
    kind = "InferenceEndpointConfig" if ep.kind == "hyperpod" else "Deployment"
    return kube.rest().get(object_path(kind, ep.name, NS))


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_apply_creates_the_objects_and_applying_the_same_manifest_again_changes_nothing(
        kind: str, seeded: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint(kind)
    manifest = cluster.render(release, ep, release.tuple_hash())
    first = cluster.apply(ep, manifest)
    assert first.changed and first.conflicts == [] and first.manifest.sha256 == manifest.sha256
    live = main_object(seeded, ep)
    assert live is not None and live["spec"] == manifest.objects[-1 if kind == "hyperpod" else 3]["spec"]
    managers = {m["manager"] for m in live["metadata"]["managedFields"]}
    assert managers == {"kimi-ops"}
    version = live["metadata"]["resourceVersion"]

    again = cluster.apply(ep, RenderedManifest.from_text(manifest.text))
    assert not again.changed and again.conflicts == []
    assert main_object(seeded, ep)["metadata"]["resourceVersion"] == version  # type: ignore[index]


def test_a_new_release_changes_the_spec_and_its_generation(seeded: KubeStandIn, cluster: KubernetesCluster,
                                                             release: ReleaseManifest) -> None:
    ep = endpoint()
    cluster.apply(ep, cluster.render(release, ep, release.tuple_hash()))
    newer = other_release(release)
    result = cluster.apply(ep, cluster.render(newer, ep, newer.tuple_hash()))
    live = main_object(seeded, ep)
    assert result.changed and live is not None
    assert live["metadata"]["generation"] == 2
    assert live["metadata"]["labels"]["kimi-ops.io/release"] == "kimi-k3-2026-09-01"
    assert {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"} in live["spec"]["worker"]["environmentVariables"]


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_reapplying_the_stored_previous_manifest_restores_it_exactly(
        kind: str, seeded: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint(kind)
    previous = cluster.render(release, ep, release.tuple_hash())
    cluster.apply(ep, previous)
    stored = previous.text  # what the deployment record keeps
    newer = other_release(release)
    cluster.apply(ep, cluster.render(newer, ep, newer.tuple_hash()))

    rollback = cluster.apply(ep, RenderedManifest.from_text(stored))
    assert rollback.changed and rollback.manifest.sha256 == previous.sha256
    live = main_object(seeded, ep)
    wanted = next(o for o in previous.objects if o["kind"] == live["kind"])  # type: ignore[index]
    assert live["spec"] == wanted["spec"]  # type: ignore[index]  # the added variable is gone again
    assert live["metadata"]["annotations"]["kimi-ops.io/tuple-hash"] == release.tuple_hash()  # type: ignore[index]


def test_an_invalid_stored_manifest_is_refused_with_schema_paths_and_nothing_is_applied(
        seeded: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint()
    objects = copy.deepcopy(cluster.render(release, ep, release.tuple_hash()).objects)
    objects[-1]["spec"]["worker"]["requestLimits"]["maxConcurrentRequests"] = 0
    broken = RenderedManifest.of(objects)
    with pytest.raises(InvalidManifest) as refused:
        cluster.apply(ep, broken)
    assert refused.value.errors == [
        "InferenceEndpointConfig/kimi-hyperpod spec.worker.requestLimits.maxConcurrentRequests: 0 is less than the minimum of 1"]
    assert main_object(seeded, ep) is None


def test_a_field_owned_by_another_manager_is_reported_as_a_conflict_and_only_forced_on_request(
        seeded: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint()
    manifest = cluster.render(release, ep, release.tuple_hash())
    cluster.apply(ep, manifest)
    path = object_path("InferenceEndpointConfig", ep.name, NS)
    seeded.rest().merge_patch(path, {"spec": {"worker": {"requestLimits": {"maxConcurrentRequests": 32}}}},
                              manager="kubectl-edit")

    refused = cluster.apply(ep, manifest)
    assert not refused.changed
    assert refused.conflicts == ['InferenceEndpointConfig/kimi-hyperpod .spec.worker.requestLimits.maxConcurrentRequests: '
                                 'conflict with "kubectl-edit" using inference.sagemaker.aws.amazon.com/v1']
    assert main_object(seeded, ep)["spec"]["worker"]["requestLimits"]["maxConcurrentRequests"] == 32  # type: ignore[index]

    forced = cluster.apply(ep, manifest, force=True)
    assert forced.changed and forced.conflicts == []
    assert main_object(seeded, ep)["spec"]["worker"]["requestLimits"]["maxConcurrentRequests"] == 8  # type: ignore[index]


def test_a_conflict_on_one_eks_object_applies_none_of_them(seeded: KubeStandIn, cluster: KubernetesCluster,
                                                           release: ReleaseManifest) -> None:
    ep = endpoint("eks")
    manifest = cluster.render(release, ep, release.tuple_hash())
    cluster.apply(ep, manifest)
    seeded.rest().merge_patch(object_path("Deployment", ep.name, NS), {"spec": {"replicas": 0}}, manager="kubectl-scale")
    newer = other_release(release)
    result = cluster.apply(ep, cluster.render(newer, ep, newer.tuple_hash()))
    assert [c.split(":")[0] for c in result.conflicts] == ["Deployment/kimi-eks .spec.replicas"]
    service = seeded.rest().get(object_path("Service", ep.name, NS))
    assert service is not None and service["metadata"]["labels"]["kimi-ops.io/release"] == "kimi-k3-2026-08-01"


def test_an_unreachable_api_server_fails_the_apply_with_one_line_and_applies_nothing(release: ReleaseManifest) -> None:
    config = client.Configuration()
    config.host = "http://127.0.0.1:9"
    config.retries = 0
    ep = endpoint()
    with client.ApiClient(config) as api:
        cluster = KubernetesCluster(api)
        with pytest.raises(ClusterError) as failed:
            cluster.apply(ep, cluster.render(release, ep, release.tuple_hash()))
    message = str(failed.value)
    assert message.startswith("dry run of NetworkPolicy/kimi-hyperpod-egress failed, nothing was applied:")
    assert "\n" not in message


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_admission_close_and_reopen_are_visible_in_the_configmap_and_on_the_endpoint(
        kind: str, seeded: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint(kind)
    manifest = cluster.render(release, ep, release.tuple_hash())
    cluster.apply(ep, manifest)

    cluster.set_admission(ep, False, "closed for rollback #7")
    configmap = seeded.rest().get(object_path("ConfigMap", f"kimi-ops-admission-{ep.name}", NS))
    assert configmap is not None
    assert configmap["data"] == {"open": "false", "reason": "closed for rollback #7", "changed-at": START.isoformat(),
                                 "endpoint": ep.name, "generation": "1"}
    assert main_object(seeded, ep)["metadata"]["annotations"][ADMISSION_ANNOTATION] == "closed"  # type: ignore[index]

    # Re-applying the release neither conflicts with nor removes the admission marker.
    again = cluster.apply(ep, manifest)
    assert not again.changed and again.conflicts == []
    assert main_object(seeded, ep)["metadata"]["annotations"][ADMISSION_ANNOTATION] == "closed"  # type: ignore[index]

    cluster.set_admission(ep, True, "reopened after rollback #7")
    assert cluster.admission(ep) == {"open": "true", "reason": "reopened after rollback #7",
                                     "changed-at": START.isoformat(), "endpoint": ep.name, "generation": "2"}
    assert main_object(seeded, ep)["metadata"]["annotations"][ADMISSION_ANNOTATION] == "open"  # type: ignore[index]
    # The application layer writes back what it enforces; kimi-ops reads it (and never writes it).
    assert cluster.admission_enforced(ep) is None
    seeded.rest().merge_patch(object_path("ConfigMap", f"kimi-ops-admission-{ep.name}", NS),
                              {"data": {"enforced-generation": "2"}}, manager="application-layer")
    assert cluster.admission_enforced(ep) == 2
    cluster.set_admission(ep, False, "closed again")
    assert cluster.admission(ep)["enforced-generation"] == "2"  # type: ignore[index]  # its own field survives the apply


def test_admission_can_be_closed_before_anything_is_deployed(seeded: KubeStandIn, cluster: KubernetesCluster) -> None:
    ep = endpoint()
    assert cluster.admission(ep) is None
    cluster.set_admission(ep, False, "maintenance")
    assert cluster.admission(ep)["open"] == "false"  # type: ignore[index]
    assert main_object(seeded, ep) is None


def test_each_endpoint_is_served_by_the_cluster_of_its_context(seeded: KubeStandIn, release: ReleaseManifest) -> None:
    with start_kube() as other:
        seed_cluster(other.rest(), namespace=NS, zone="us-east-1b")
        stand_ins = {"prod": seeded, "staging": other}

        def factory(context: str | None) -> client.ApiClient:
            if context not in stand_ins:
                raise LookupError(f"context {context!r} not found in kubeconfig")
            return stand_ins[context].api_client()

        clusters = ContextClusters(client_factory=factory, poll_seconds=0.02)
        prod, staging = endpoint(cluster_context="prod"), endpoint(cluster_context="staging")
        assert clusters.cluster(prod) is clusters.cluster(prod)  # one client per context
        staging_nodes = next(c for c in clusters.preflight(staging) if c.name == "cluster.gpu_nodes")
        assert staging_nodes.details["zones"] == ["us-east-1b"]

        clusters.apply(staging, clusters.render(release, staging, release.tuple_hash()))
        assert main_object(other, staging) is not None and main_object(seeded, prod) is None

        [unknown] = clusters.preflight(endpoint(cluster_context="nowhere"))
        assert unknown.status == "error" and "context 'nowhere' not found" in unknown.reason
