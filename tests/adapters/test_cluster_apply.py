"""The cluster adapter against kmock's Kubernetes emulator over HTTP, with a simulated HyperPod operator.

Preflight, server-side apply (idempotent, conflicts, refusals), rollout watches to
success, failure, timeout and stop, resuming after a restart, and admission.
"""

from __future__ import annotations

import copy
import datetime as dt
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster import (
    ClusterError,
    ContextClusters,
    InvalidManifest,
    KubernetesCluster,
)
from bot.adapters.cluster.kube import ADMISSION_ANNOTATION
from bot.adapters.cluster.preflight import crd_name
from bot.adapters.cluster.rest import collection_path, object_path
from bot.adapters.cluster.rollout import read_hyperpod
from bot.config import EndpointSettings
from bot.domain.coldstart import breakdown, go_duration
from bot.domain.release import ReleaseManifest
from bot.domain.rollout import RenderedManifest, RolloutProgress
from bot.sandbox.kube import KubeStandIn, seed_cluster, start_kube
from bot.sandbox.operator import OperatorSimulator
from tests.conftest import EXAMPLE_RELEASE, START

NS = "model-serving"


@pytest.fixture()
def kube() -> Iterator[KubeStandIn]:
    with start_kube() as stand_in:
        yield stand_in


@pytest.fixture()
def seeded(kube: KubeStandIn) -> KubeStandIn:
    seed_cluster(kube.rest(), namespace=NS, zone="us-east-1a")
    return kube


@pytest.fixture()
def cluster(seeded: KubeStandIn) -> KubernetesCluster:
    return KubernetesCluster(seeded.api_client(), poll_seconds=0.02, clock=FrozenClock(START))


@pytest.fixture()
def release() -> ReleaseManifest:
    return ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text()))


def endpoint(kind: str = "hyperpod", **overrides: Any) -> EndpointSettings:
    data: dict[str, Any] = {"name": f"kimi-{kind}", "kind": kind, "namespace": NS, "availability_zone": "us-east-1a"}
    data.update(overrides)
    return EndpointSettings(**data)


def main_object(kube: KubeStandIn, ep: EndpointSettings) -> dict[str, Any] | None:
    kind = "InferenceEndpointConfig" if ep.kind == "hyperpod" else "Deployment"
    return kube.rest().get(object_path(kind, ep.name, NS))


def other_release(release: ReleaseManifest) -> ReleaseManifest:
    data = release.model_dump(mode="json")
    data["name"] = "kimi-k3-2026-09-01"
    data["serving"]["env"]["VLLM_LOGGING_LEVEL"] = "INFO"
    return ReleaseManifest.model_validate(data)


class Progress(list[RolloutProgress]):
    def __call__(self, item: RolloutProgress) -> None:
        self.append(item)

    @property
    def text(self) -> str:
        return "\n".join(p.message for p in self)


# -- preflight ---------------------------------------------------------------------------------------------


def test_preflight_passes_on_a_ready_hyperpod_cluster_and_reports_the_gpu_zone(cluster: KubernetesCluster) -> None:
    checks = {c.name: c for c in cluster.preflight(endpoint())}
    assert {n: c.status for n, c in checks.items()} == {
        "cluster.crd": "pass", "cluster.operator": "pass", "cluster.namespace": "pass", "cluster.gpu_nodes": "pass"}
    assert checks["cluster.gpu_nodes"].details["zones"] == ["us-east-1a"]


def test_eks_preflight_does_not_ask_for_the_hyperpod_operator(cluster: KubernetesCluster) -> None:
    assert [c.name for c in cluster.preflight(endpoint("eks"))] == ["cluster.namespace", "cluster.gpu_nodes"]


def test_preflight_reports_a_missing_crd(seeded: KubeStandIn, cluster: KubernetesCluster) -> None:
    seeded.remove("CustomResourceDefinition", crd_name())
    crd = next(c for c in cluster.preflight(endpoint()) if c.name == "cluster.crd")
    assert crd.status == "fail" and "install the HyperPod inference operator" in crd.reason


def test_preflight_reports_an_unavailable_operator(kube: KubeStandIn) -> None:
    seed_cluster(kube.rest(), namespace=NS, operator_available=False)
    checks = {c.name: c for c in KubernetesCluster(kube.api_client()).preflight(endpoint())}
    assert checks["cluster.operator"].status == "fail" and "not available" in checks["cluster.operator"].reason
    assert checks["cluster.crd"].status == "pass"


def test_preflight_reports_a_missing_namespace(cluster: KubernetesCluster) -> None:
    checks = {c.name: c for c in cluster.preflight(endpoint(namespace="kimi-elsewhere"))}
    assert checks["cluster.namespace"].status == "fail" and "kimi-elsewhere does not exist" in checks["cluster.namespace"].reason


def test_preflight_reports_a_node_without_eight_gpus(kube: KubeStandIn) -> None:
    seed_cluster(kube.rest(), namespace=NS, gpus=4)
    nodes = next(c for c in KubernetesCluster(kube.api_client()).preflight(endpoint()) if c.name == "cluster.gpu_nodes")
    assert nodes.status == "fail" and "8 allocatable nvidia.com/gpu" in nodes.reason and "=4" in nodes.reason


def test_preflight_reports_a_cordoned_gpu_node(seeded: KubeStandIn, cluster: KubernetesCluster) -> None:
    [node] = seeded.rest().items("/api/v1/nodes")
    seeded.rest().merge_patch(f"/api/v1/nodes/{node['metadata']['name']}", {"spec": {"unschedulable": True}},
                              manager="kubectl-cordon")
    nodes = next(c for c in cluster.preflight(endpoint()) if c.name == "cluster.gpu_nodes")
    assert nodes.status == "fail" and "is cordoned" in nodes.reason


def test_preflight_reports_no_node_of_the_instance_type(kube: KubeStandIn) -> None:
    seed_cluster(kube.rest(), namespace=NS, instance_type="ml.p5.48xlarge")
    nodes = next(c for c in KubernetesCluster(kube.api_client()).preflight(endpoint()) if c.name == "cluster.gpu_nodes")
    assert nodes.status == "fail" and "no node of type p6-b300.48xlarge" in nodes.reason


def test_preflight_is_an_error_not_a_pass_when_the_api_server_is_unreachable() -> None:
    config = client.Configuration()
    config.host = "http://127.0.0.1:9"
    config.retries = 0
    with client.ApiClient(config) as api:
        checks = KubernetesCluster(api).preflight(endpoint())
    assert {c.status for c in checks} == {"error"}
    assert all("could not ask the Kubernetes API" in c.reason for c in checks)
    # In words, not urllib3's repr of its connection pool and retry state.
    assert all("at http://127.0.0.1:9 is unreachable (connection refused)" in c.reason for c in checks), checks
    assert not any("HTTPConnectionPool" in c.reason or "MaxRetryError" in c.reason for c in checks)


# -- apply -------------------------------------------------------------------------------------------------


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


# -- watch -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_a_rollout_is_followed_to_success_with_pods_and_events(
        kind: str, seeded: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint(kind)
    manifest = cluster.render(release, ep, release.tuple_hash())
    cluster.apply(ep, manifest)
    progress = Progress()
    # Each step of the simulated rollout lasts long enough for the watch to see it on a busy machine (at 20 ms a
    # step, the pod's ContainerCreating came and went between two of the watch's reads).
    with OperatorSimulator(seeded.rest(), NS, kind=kind, step_seconds=0.4):  # type: ignore[arg-type]
        outcome = cluster.watch(ep, manifest, timeout_seconds=60, on_progress=progress)
    assert outcome.status == "succeeded"
    assert "ContainerCreating" in progress.text and "Running (ready)" in progress.text
    assert "event Normal Scheduled Pod/" in progress.text
    if kind == "hyperpod":
        assert [p.state for p in progress if p.message.startswith("kimi-hyperpod:")][-1] == "DeploymentComplete"
        assert "DeploymentInProgress" in [p.state for p in progress]
    assert all(p.at == START.isoformat() for p in progress)
    # The cold start, from the pod's status times and the kubelet's Pulled event (the simulator's 95/840/380 s).
    cold = cluster.cold_start(ep, first_completion_s=1.4)
    assert cold is not None and cold.image_pull_s == 95 and cold.weight_transfer_s == 840
    assert cold.load_s is not None and abs(cold.load_s - 380) <= 1 and cold.first_completion_s == 1.4
    assert "image pull 1 min 35 s · weight transfer 14 min 00 s" in cold.words()


def test_a_cold_start_part_kubernetes_did_not_record_is_said_so_never_guessed() -> None:
    pod = {"status": {"containerStatuses": [{"name": "vllm", "state": {"running": {"startedAt": "2026-12-01T09:00:00Z"}}}],
                      "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T09:06:20Z"}]}}
    events = [{"reason": "Pulling", "firstTimestamp": "2026-12-01T08:40:00Z"},
              {"reason": "Pulled", "message": 'Successfully pulled image "vllm"', "lastTimestamp": "2026-12-01T08:41:05Z"}]
    cold = breakdown(pod, events, container="vllm", first_completion_s=None)
    assert (cold.image_pull_s, cold.weight_transfer_s, cold.load_s) == (65.0, None, 380.0)
    assert "weight transfer not recorded" in cold.words() and "first completion not recorded" in cold.words()
    assert go_duration("2m3.5s") == 123.5 and go_duration("850ms") == 0.85 and go_duration("soon") is None


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_a_failed_rollout_reports_the_operators_reason(kind: str, seeded: KubeStandIn, cluster: KubernetesCluster,
                                                       release: ReleaseManifest) -> None:
    ep = endpoint(kind)
    manifest = cluster.render(release, ep, release.tuple_hash())
    cluster.apply(ep, manifest)
    progress = Progress()
    with OperatorSimulator(seeded.rest(), NS, kind=kind, behaviour="fail", step_seconds=0.02,  # type: ignore[arg-type]
                           failure_reason="CUDA out of memory while loading experts"):
        outcome = cluster.watch(ep, manifest, timeout_seconds=30, on_progress=progress)
    assert outcome.status == "failed"
    assert "CUDA out of memory while loading experts" in outcome.reason
    assert ("DeploymentFailed" if kind == "hyperpod" else "ProgressDeadlineExceeded") in outcome.reason
    assert "CrashLoopBackOff" in progress.text and "event Warning BackOff" in progress.text


def test_unreadable_events_do_not_block_the_verdict(seeded: KubeStandIn, cluster: KubernetesCluster,
                                                    release: ReleaseManifest) -> None:
    ep = endpoint()
    manifest = cluster.render(release, ep, release.tuple_hash())
    cluster.apply(ep, manifest)
    seeded.run(lambda: seeded.emulator.resources.__delitem__("v1/events"))  # e.g. RBAC without events: list
    progress = Progress()
    with OperatorSimulator(seeded.rest(), NS, step_seconds=0.02, emit_events=False):
        outcome = cluster.watch(ep, manifest, timeout_seconds=30, on_progress=progress)
    assert outcome.status == "succeeded"
    assert "pods and events are not readable (HTTP 404" in progress.text


def test_a_rollout_that_never_finishes_times_out_at_the_deadline(seeded: KubeStandIn, cluster: KubernetesCluster,
                                                                 release: ReleaseManifest) -> None:
    ep = endpoint()
    manifest = cluster.render(release, ep, release.tuple_hash())
    cluster.apply(ep, manifest)
    progress = Progress()
    with OperatorSimulator(seeded.rest(), NS, behaviour="hang", step_seconds=0.02):
        outcome = cluster.watch(ep, manifest, timeout_seconds=0.5, on_progress=progress)
    assert outcome.status == "timed_out"
    assert "no verdict within" in outcome.reason


def test_the_stop_event_ends_a_watch(seeded: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint()
    manifest = cluster.render(release, ep, release.tuple_hash())
    cluster.apply(ep, manifest)
    stop = threading.Event()
    in_progress = threading.Event()
    outcomes: list[Any] = []

    def note(item: RolloutProgress) -> None:
        if item.state == "DeploymentInProgress":
            in_progress.set()

    with OperatorSimulator(seeded.rest(), NS, behaviour="hang", step_seconds=0.02):
        watcher = threading.Thread(target=lambda: outcomes.append(
            cluster.watch(ep, manifest, timeout_seconds=600, on_progress=note, stop=stop)))
        watcher.start()
        assert in_progress.wait(30)
        stop.set()
        watcher.join(30)
    assert not watcher.is_alive()
    assert outcomes[0].status == "stopped"


def test_a_watch_resumes_after_a_restart_and_never_trusts_the_previous_releases_status(
        seeded: KubeStandIn, release: ReleaseManifest) -> None:
    ep = endpoint()
    before_restart = KubernetesCluster(seeded.api_client(), poll_seconds=0.02)
    manifest = before_restart.render(release, ep, release.tuple_hash())
    before_restart.apply(ep, manifest)
    with OperatorSimulator(seeded.rest(), NS, step_seconds=0.02):
        assert before_restart.watch(ep, manifest, timeout_seconds=30, on_progress=Progress()).status == "succeeded"

    after_restart = KubernetesCluster(seeded.api_client(), poll_seconds=0.02)  # a new process, same cluster
    assert after_restart.watch(ep, manifest, timeout_seconds=30, on_progress=Progress()).status == "succeeded"

    newer = other_release(release)
    newer_manifest = after_restart.render(newer, ep, newer.tuple_hash())
    after_restart.apply(ep, newer_manifest)
    # The operator has not seen generation 2 yet: the old DeploymentComplete is not this release's success.
    stale = after_restart.watch(ep, newer_manifest, timeout_seconds=0.3, on_progress=Progress())
    assert stale.status == "timed_out"
    with OperatorSimulator(seeded.rest(), NS, step_seconds=0.02):
        assert after_restart.watch(ep, newer_manifest, timeout_seconds=30, on_progress=Progress()).status == "succeeded"


def test_a_watch_tells_only_the_events_since_this_deployments_apply(
        seeded: KubeStandIn, cluster: KubernetesCluster, release: ReleaseManifest) -> None:
    ep = endpoint()
    # An earlier deploy's pod (named after the same endpoint) left its events an hour ago.
    an_hour_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    seeded.rest().create(collection_path("Event", NS), {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{ep.name}-5f7c9-old.17f", "namespace": NS},
        "involvedObject": {"kind": "Pod", "name": f"{ep.name}-5f7c9-old", "namespace": NS}, "type": "Warning",
        "reason": "BackOff", "message": "Back-off restarting failed container vllm", "count": 3,
        "firstTimestamp": an_hour_ago, "lastTimestamp": an_hour_ago})
    manifest = cluster.render(release, ep, release.tuple_hash())
    applied_at = dt.datetime.now(dt.UTC)
    cluster.apply(ep, manifest)
    progress = Progress()
    with OperatorSimulator(seeded.rest(), NS, step_seconds=0.02):
        outcome = cluster.watch(ep, manifest, timeout_seconds=30, on_progress=progress, since=applied_at)
    assert outcome.status == "succeeded"
    assert "event Normal Scheduled Pod/" in progress.text  # this rollout's own events are told…
    assert "BackOff" not in progress.text and "-old" not in progress.text  # …the earlier pod's are not


def test_watching_an_endpoint_that_was_never_applied_fails_at_once(cluster: KubernetesCluster,
                                                                  release: ReleaseManifest) -> None:
    ep = endpoint()
    outcome = cluster.watch(ep, cluster.render(release, ep, release.tuple_hash()), timeout_seconds=30, on_progress=Progress())
    assert outcome.status == "failed" and "does not exist" in outcome.reason


# -- admission ---------------------------------------------------------------------------------------------


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


# -- several clusters --------------------------------------------------------------------------------------


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


# -- reading a status --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "verdict"), [
    ({"state": "DeploymentComplete", "observedGeneration": 1}, "pending"),
    ({"state": "DeploymentComplete", "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}]}, "pending"),
    ({"state": "DeploymentComplete", "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 2}]}, "succeeded"),
    ({"state": "DeploymentComplete"}, "succeeded"),
    ({"state": "DeploymentFailed", "observedGeneration": 2}, "failed"),
    ({"state": "DeletionInProgress", "observedGeneration": 2}, "failed"),
    ({}, "pending"),
])
def test_a_status_counts_only_for_the_generation_it_observed(status: dict[str, Any], verdict: str) -> None:
    assert read_hyperpod({"metadata": {"name": "kimi", "generation": 2}, "status": status}).verdict == verdict
