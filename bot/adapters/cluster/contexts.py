"""The ``Cluster`` port across clusters: one :class:`KubernetesCluster` per kubeconfig context.

Endpoints name their cluster with ``cluster_context`` (a kubeconfig context);
an endpoint without one uses the in-cluster service account when the bot runs
in a pod, else the kubeconfig's current context. Clients are made on first use
and kept for the life of the process.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from bot.adapters.clock import Clock
from bot.adapters.cluster import observe as observation
from bot.adapters.cluster.kube import KubernetesCluster, render_manifest
from bot.config import EndpointSettings
from bot.domain.admission import Admission, RouteStatus
from bot.domain.checks import Check
from bot.domain.coldstart import ColdStart
from bot.domain.doors import DoorPath
from bot.domain.drift import Observed
from bot.domain.health import WorkloadHealth
from bot.domain.release import ReleaseManifest
from bot.domain.rollout import (
    ApplyResult,
    RenderedManifest,
    RolloutOutcome,
    RolloutProgress,
)
from bot.logs import logger_for

log = logger_for(__name__)

ClientFactory = Callable[[str | None], Any]


def kubeconfig_client(context: str | None) -> Any:
    """An ``ApiClient`` for ``context``; ``None`` means in-cluster, falling back to the current context."""
    from kubernetes import client, config

    # KUBECONFIG as it is now: the kubernetes package reads its default once, when it is first imported.
    path = os.environ.get("KUBECONFIG") or None
    if context is None:
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            return config.new_client_from_config(config_file=path)
    return config.new_client_from_config(config_file=path, context=context)


class ContextClusters:
    """Delegates each call to the cluster of the endpoint's ``cluster_context``."""

    def __init__(self, *, client_factory: ClientFactory = kubeconfig_client, poll_seconds: float = 5.0,
                 clock: Clock | None = None) -> None:
        self.client_factory = client_factory
        self.poll_seconds = poll_seconds
        self.clock = clock
        self._clusters: dict[str | None, KubernetesCluster] = {}
        self._lock = threading.Lock()

    def cluster(self, endpoint: EndpointSettings) -> KubernetesCluster:
        with self._lock:
            found = self._clusters.get(endpoint.cluster_context)
            if found is None:
                found = KubernetesCluster(self.client_factory(endpoint.cluster_context),
                                          poll_seconds=self.poll_seconds, clock=self.clock)
                self._clusters[endpoint.cluster_context] = found
            return found

    def render(self, release: ReleaseManifest, endpoint: EndpointSettings, release_hash: str) -> RenderedManifest:
        return render_manifest(release, endpoint, release_hash)  # needs no cluster

    def preflight(self, endpoint: EndpointSettings) -> list[Check]:
        try:
            cluster = self.cluster(endpoint)
        except Exception as exc:  # no kubeconfig, unknown context: the gate shows why, never a pass
            return [
                Check.errored("cluster.access", f"no access to cluster context {endpoint.cluster_context or '(default)'}: {exc}")
            ]
        return cluster.preflight(endpoint)

    def doors(self, endpoint: EndpointSettings, manifest: RenderedManifest) -> list[DoorPath]:
        return self.cluster(endpoint).doors(endpoint, manifest)

    def apply(self, endpoint: EndpointSettings, manifest: RenderedManifest, force: bool = False) -> ApplyResult:
        return self.cluster(endpoint).apply(endpoint, manifest, force=force)

    def watch(
        self,
        endpoint: EndpointSettings,
        manifest: RenderedManifest,
        *,
        timeout_seconds: float,
        on_progress: Callable[[RolloutProgress], None],
        stop: threading.Event | None = None,
        since: dt.datetime | None = None,
    ) -> RolloutOutcome:
        return self.cluster(endpoint).watch(
            endpoint, manifest, timeout_seconds=timeout_seconds, on_progress=on_progress, stop=stop, since=since
        )

    def set_admission(self, endpoint: EndpointSettings, open_: bool, reason: str) -> int:
        return self.cluster(endpoint).set_admission(endpoint, open_, reason)

    def admission_enforced(self, endpoint: EndpointSettings) -> int | None:
        return self.cluster(endpoint).admission_enforced(endpoint)

    def set_route(self, endpoint: EndpointSettings, admission: Admission, reason: str) -> RouteStatus:
        return self.cluster(endpoint).set_route(endpoint, admission, reason)

    def route_status(self, endpoint: EndpointSettings) -> RouteStatus | None:
        return self.cluster(endpoint).route_status(endpoint)

    def next_route_status(self, endpoint: EndpointSettings, seen: RouteStatus, seconds: float) -> RouteStatus | None:
        return self.cluster(endpoint).next_route_status(endpoint, seen, seconds)

    def observe(self, endpoint: EndpointSettings) -> Observed | None:
        try:
            cluster = self.cluster(endpoint)
        except Exception as exc:  # no kubeconfig, unknown context: unknown, like an API that does not answer
            log.warning("could not observe endpoint %s: no access to cluster context %s: %s", endpoint.name,
                        endpoint.cluster_context or "(default)", exc)
            return None
        return cluster.observe(endpoint)

    def read_manifest(self, endpoint: EndpointSettings, manifest: RenderedManifest) -> Observed:
        # Reading stored bytes needs no cluster: no kubeconfig is loaded for it.
        return observation.manifest_observed(manifest.objects, endpoint)

    def health(self, endpoint: EndpointSettings) -> WorkloadHealth | None:
        try:
            cluster = self.cluster(endpoint)
        except Exception as exc:  # no kubeconfig, unknown context: unknown, as observe says
            log.warning("could not read the health of %s: no access to cluster context %s: %s", endpoint.name,
                        endpoint.cluster_context or "(default)", exc)
            return None
        return cluster.health(endpoint)

    def cold_start(self, endpoint: EndpointSettings, first_completion_s: float | None) -> ColdStart | None:
        try:
            cluster = self.cluster(endpoint)
        except Exception as exc:  # no kubeconfig: the rollout's timings are simply not recorded
            log.warning("could not read the cold start of %s: %s", endpoint.name, exc)
            return None
        return cluster.cold_start(endpoint, first_completion_s)

    def apply_rules(self, endpoint: EndpointSettings, rule_object: dict[str, Any]) -> bool:
        return self.cluster(endpoint).apply_rules(endpoint, rule_object)

    def delete_pods(self, endpoint: EndpointSettings) -> list[str]:
        return self.cluster(endpoint).delete_pods(endpoint)

    def cordon(self, endpoint: EndpointSettings, nodes: Sequence[str], cordoned: bool) -> None:
        self.cluster(endpoint).cordon(endpoint, nodes, cordoned)

    def drill_variant(self, endpoint: EndpointSettings, manifest: RenderedManifest, kind: str) -> RenderedManifest:
        return self.cluster(endpoint).drill_variant(endpoint, manifest, kind)
