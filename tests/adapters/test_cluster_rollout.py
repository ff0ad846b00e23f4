"""Rollout watches against kmock's Kubernetes emulator over HTTP, with a simulated HyperPod operator: to success,
failure, timeout and stop, resuming after a restart, the events since this deployment's apply, and a status that
counts only for the generation it observed.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest

from bot.adapters.cluster import KubernetesCluster
from bot.adapters.cluster.rest import collection_path
from bot.adapters.cluster.rollout import read_hyperpod
from bot.domain.coldstart import breakdown, go_duration
from bot.domain.release import ReleaseManifest
from bot.domain.rollout import RolloutProgress
from bot.sandbox.kube import KubeStandIn
from bot.sandbox.operator import OperatorSimulator
from tests.cluster_support import NS, endpoint, other_release
from tests.cluster_support import cluster as cluster
from tests.cluster_support import kube as kube
from tests.cluster_support import release as release
from tests.cluster_support import seeded as seeded
from tests.conftest import START


class Progress(list[RolloutProgress]):
    def __call__(self, item: RolloutProgress) -> None:
        self.append(item)

    @property
    def text(self) -> str:
        return "\n".join(p.message for p in self)


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
