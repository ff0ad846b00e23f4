"""The ``Cluster`` port on the official ``kubernetes`` client.

* ``render`` builds the objects (:mod:`.render`) and validates them
  (:mod:`.validate`); an invalid manifest raises :class:`InvalidManifest`.
* ``preflight`` answers the guide's questions before any apply: CRD and
  operator (HyperPod), namespace, a node of the instance type with 8 GPUs.
* ``apply`` is server-side apply with field manager ``kimi-ops``. All objects are
  first applied as a server-side dry run, so a conflict or a refusal on any of
  them applies nothing. ``changed`` compares each object's ``resourceVersion``
  before and after: applying the same bytes twice is a no-op on the server.
* ``watch`` reads the endpoint object, its pods and its events whenever the
  endpoint object changes (the Kubernetes watch API, :mod:`.watching`) and at
  least every ``poll_seconds``, until success, failure, the deadline or
  ``stop``. It only reads, so it resumes after a restart by being called again.
* Admission (see DESIGN.md, "Admission and the traffic layer"): the ConfigMap
  ``kimi-ops-admission-<endpoint>`` holds ``open: "true"|"false"``, ``reason``
  and ``changed-at``; the application layer in front of the model reads it.
  The endpoint object gets the annotation ``kimi-ops.io/admission`` for people
  using ``kubectl``. Both are written under their own field manager, so the
  release apply never removes or conflicts with them.
* Route (see DESIGN.md, "Traffic layer"): ``set_route`` and ``route_status``
  keep the endpoint's Gateway API HTTPRoute (:mod:`.route`) under the same
  ``kimi-ops-admission`` field manager.
* ``observe`` reads back what runs (:mod:`.observe`): release, tuple hash,
  image and request limits of the applied workload object, and the route's
  admission and parents' verdict; ``None`` when the API cannot be read.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from bot.adapters.clock import Clock, SystemClock
from bot.adapters.cluster import drills as drilling
from bot.adapters.cluster import observe as observation
from bot.adapters.cluster import render as rendering
from bot.adapters.cluster.doors import find_doors
from bot.adapters.cluster.errors import ClusterError, InvalidManifest
from bot.adapters.cluster.health import read_cold_start, read_health
from bot.adapters.cluster.preflight import preflight_checks
from bot.adapters.cluster.rest import ApplyConflict, Rest, api_error, collection_path, describe_object, object_path
from bot.adapters.cluster.rollout import (
    Reading,
    belongs_to,
    event_key,
    event_summary,
    happened_before,
    pod_summary,
    read_deployment,
    read_hyperpod,
)
from bot.adapters.cluster.route import apply_route, current_route, next_route_status
from bot.adapters.cluster.validate import manifest_errors
from bot.adapters.cluster.watching import resource_version, wait_for_change
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

FIELD_MANAGER = "kimi-ops"
ADMISSION_MANAGER = "kimi-ops-admission"
ADMISSION_ANNOTATION = "kimi-ops.io/admission"
EVENTS_PER_POLL = 5
GENERATION_KEY = "generation"
"""Counts kimi-ops's admission writes; the application layer writes back the one it enforces (:data:`ENFORCED_KEY`)."""
ENFORCED_KEY = "enforced-generation"


def _generation(text: str | None) -> int:
    try:
        return max(0, int(str(text)))
    except ValueError:
        return 0


def admission_configmap_name(endpoint: EndpointSettings) -> str:
    return f"kimi-ops-admission-{endpoint.name}"


def render_manifest(release: ReleaseManifest, endpoint: EndpointSettings, release_hash: str) -> RenderedManifest:
    """Render and validate; raises :class:`InvalidManifest` listing each schema path."""
    objects = rendering.render_objects(release, endpoint, release_hash)
    errors = rendering.consistency_errors(release, endpoint) + manifest_errors(objects)
    if errors:
        raise InvalidManifest(errors)
    return RenderedManifest.of(objects)


class KubernetesCluster:
    """HyperPod and EKS endpoints through one ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any, *, poll_seconds: float = 5.0, clock: Clock | None = None) -> None:
        self.rest = Rest(api_client)
        self.poll_seconds = poll_seconds
        self.clock: Clock = clock or SystemClock()

    # -- render ---------------------------------------------------------------------------------------

    def render(self, release: ReleaseManifest, endpoint: EndpointSettings, release_hash: str) -> RenderedManifest:
        return render_manifest(release, endpoint, release_hash)

    # -- preflight ------------------------------------------------------------------------------------

    def preflight(self, endpoint: EndpointSettings) -> list[Check]:
        return preflight_checks(self.rest, endpoint)

    def doors(self, endpoint: EndpointSettings, manifest: RenderedManifest) -> list[DoorPath]:
        try:
            return find_doors(self.rest, endpoint, manifest.objects)
        except Exception as exc:  # said as the other cluster checks say it: never the client's connection-pool dump
            raise ClusterError(f"reading the ways to {endpoint.name}'s model pods in {endpoint.namespace} failed: "
                               f"{api_error(exc)}") from exc

    # -- apply ----------------------------------------------------------------------------------------

    def apply(self, endpoint: EndpointSettings, manifest: RenderedManifest, force: bool = False) -> ApplyResult:
        errors = manifest_errors(manifest.objects)
        errors += [
            f"{describe_object(o)} metadata.namespace: must be {endpoint.namespace}"
            for o in manifest.objects
            if (o.get("metadata") or {}).get("namespace") not in (None, endpoint.namespace)
        ]
        if errors:
            raise InvalidManifest(errors)
        # Dry run every object first: a conflict or refusal on any one of them applies none of them.
        conflicts: list[str] = []
        for obj in manifest.objects:
            try:
                self.rest.apply(obj, manager=FIELD_MANAGER, force=force, dry_run=True)
            except ApplyConflict as exc:
                conflicts.extend(exc.conflicts)
            except Exception as exc:
                raise ClusterError(f"dry run of {describe_object(obj)} failed, nothing was applied: {api_error(exc)}") from exc
        if conflicts:
            return ApplyResult(manifest=manifest, changed=False, conflicts=conflicts)
        changed = False
        for obj in manifest.objects:
            meta = obj["metadata"]
            try:
                before = self.rest.get(object_path(obj["kind"], meta["name"], meta.get("namespace")))
                after = self.rest.apply(obj, manager=FIELD_MANAGER, force=force)
            except Exception as exc:  # after a passing dry run: the API server went away or changed its mind
                raise ClusterError(f"applying {describe_object(obj)} failed: {api_error(exc)}") from exc
            before_version = (before or {}).get("metadata", {}).get("resourceVersion")
            if before is None or before_version != (after.get("metadata") or {}).get("resourceVersion"):
                changed = True
                log.info("applied %s (changed)", describe_object(obj))
        return ApplyResult(manifest=manifest, changed=changed)

    # -- watch ----------------------------------------------------------------------------------------

    def _endpoint_object(self, endpoint: EndpointSettings) -> tuple[str, str]:
        kind = "InferenceEndpointConfig" if endpoint.kind == "hyperpod" else "Deployment"
        return kind, object_path(kind, endpoint.name, endpoint.namespace)

    def _read(self, endpoint: EndpointSettings) -> tuple[Reading, str | None]:
        """The rollout's reading and the version of the endpoint object it was read from."""
        _, path = self._endpoint_object(endpoint)
        obj = self.rest.get(path)
        return (read_hyperpod(obj) if endpoint.kind == "hyperpod" else read_deployment(obj)), resource_version(obj)

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
        stop = stop or threading.Event()
        started = time.monotonic()
        deadline = started + max(0.0, timeout_seconds)
        said: set[str] = set()
        last_state: str | None = None
        last_error: str | None = None
        seen_version: str | None = None

        def tell(message: str, state: str | None) -> None:
            try:
                on_progress(RolloutProgress(message=message, state=state, at=self.clock.now().isoformat()))
            except Exception:  # a failing notifier must not end the watch
                log.exception("rollout progress callback failed")

        while True:
            if stop.is_set():
                return RolloutOutcome("stopped", "the watch was stopped", time.monotonic() - started)
            try:
                reading, seen_version = self._read(endpoint)
                last_error = None
                if reading.state != last_state:
                    tell(f"{endpoint.name}: {reading.reason}", reading.state)
                    last_state = reading.state
                try:
                    for key, line in self._pods_and_events(endpoint, since):
                        if key not in said:
                            said.add(key)
                            tell(line, last_state)
                except Exception as exc:  # pods and events only add detail: never let them block the verdict
                    if "pods-and-events" not in said:
                        said.add("pods-and-events")
                        tell(f"{endpoint.name}: pods and events are not readable ({api_error(exc)})", last_state)
                if reading.verdict == "succeeded":
                    return RolloutOutcome("succeeded", reading.reason, time.monotonic() - started)
                if reading.verdict == "failed":
                    return RolloutOutcome("failed", reading.reason, time.monotonic() - started)
            except Exception as exc:  # transient API trouble: say so once, keep polling until the deadline
                message = api_error(exc)
                if message != last_error:
                    tell(f"{endpoint.name}: cannot read the rollout ({message}); retrying", last_state)
                    last_error = message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                where = f"still {last_state}" if last_state else "state unknown"
                return RolloutOutcome(
                    "timed_out", f"no verdict within {timeout_seconds:.0f}s ({where})", time.monotonic() - started
                )
            # The next read comes when the endpoint object changes (the watch API), or after poll_seconds at most
            # (a resync that also brings new pod and event lines).
            kind, _ = self._endpoint_object(endpoint)
            wait_for_change(self.rest.api_client, kind, endpoint.name, endpoint.namespace, seen_version,
                            seconds=min(self.poll_seconds, remaining), stop=stop)

    def _pods_and_events(self, endpoint: EndpointSettings, since: dt.datetime | None = None) -> list[tuple[str, str]]:
        """(dedup key, line) for each pod state and event of the endpoint (events last seen before ``since`` left out:
        they are an earlier deployment's, from pods named after the same endpoint)."""
        lines: list[tuple[str, str]] = []
        for pod in self.rest.items(collection_path("Pod", endpoint.namespace)):
            if belongs_to(str((pod.get("metadata") or {}).get("name", "")), endpoint.name):
                summary = pod_summary(pod)
                lines.append((summary, summary))
        events = [
            e
            for e in self.rest.items(collection_path("Event", endpoint.namespace))
            if belongs_to(str((e.get("involvedObject") or {}).get("name", "")), endpoint.name)
            and (since is None or not happened_before(e, since))
        ]
        events.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        # Each event once, keyed by name and count, newest few only so a resumed watch does not flood the thread.
        lines.extend((event_key(e), f"event {event_summary(e)}") for e in events[-EVENTS_PER_POLL:])
        return lines

    # -- admission ------------------------------------------------------------------------------------

    def set_admission(self, endpoint: EndpointSettings, open_: bool, reason: str) -> int:
        try:
            return self._set_admission(endpoint, open_, reason)
        except Exception as exc:  # said in one line: the thread and the incident quote it
            raise ClusterError(f"setting {endpoint.name}'s admission ConfigMap in {endpoint.namespace} failed: "
                               f"{api_error(exc)}") from exc

    def _set_admission(self, endpoint: EndpointSettings, open_: bool, reason: str) -> int:
        now = self.clock.now().isoformat()
        before = self.admission(endpoint) or {}
        generation = _generation(before.get(GENERATION_KEY)) + 1
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": admission_configmap_name(endpoint),
                "namespace": endpoint.namespace,
                "labels": {"app.kubernetes.io/managed-by": "kimi-ops", rendering.ENDPOINT_LABEL: endpoint.name},
            },
            "data": {"open": "true" if open_ else "false", "reason": reason, "changed-at": now, "endpoint": endpoint.name,
                     GENERATION_KEY: str(generation)},
        }
        # force: this manager is the only writer of the admission fields by design.
        self.rest.apply(configmap, manager=ADMISSION_MANAGER, force=True)
        kind, path = self._endpoint_object(endpoint)
        if self.rest.get(path) is None:
            return generation  # nothing deployed yet: the ConfigMap alone is the switch
        marker = {
            "apiVersion": rendering.IEC_API_VERSION if kind == "InferenceEndpointConfig" else "apps/v1",
            "kind": kind,
            "metadata": {
                "name": endpoint.name,
                "namespace": endpoint.namespace,
                "annotations": {ADMISSION_ANNOTATION: "open" if open_ else "closed"},
            },
        }
        self.rest.apply(marker, manager=ADMISSION_MANAGER, force=True)
        return generation

    def admission_enforced(self, endpoint: EndpointSettings) -> int | None:
        try:
            data = self.admission(endpoint)
        except Exception as exc:
            raise ClusterError(f"reading {endpoint.name}'s admission ConfigMap failed: {api_error(exc)}") from exc
        enforced = (data or {}).get(ENFORCED_KEY)
        return None if enforced is None else _generation(enforced)

    def admission(self, endpoint: EndpointSettings) -> dict[str, str] | None:
        """The admission ConfigMap's data, or ``None`` when it was never written (admission open)."""
        configmap = self.rest.get(object_path("ConfigMap", admission_configmap_name(endpoint), endpoint.namespace))
        return None if configmap is None else dict(configmap.get("data") or {})

    # -- route ----------------------------------------------------------------------------------------

    def set_route(self, endpoint: EndpointSettings, admission: Admission, reason: str) -> RouteStatus:
        """Apply the endpoint's HTTPRoute for ``admission``; raises ``RouteNotConfigured`` without a route block."""
        return apply_route(self.rest, endpoint, admission, reason, self.clock.now().isoformat())

    def route_status(self, endpoint: EndpointSettings) -> RouteStatus | None:
        return current_route(self.rest, endpoint)

    def next_route_status(self, endpoint: EndpointSettings, seen: RouteStatus, seconds: float) -> RouteStatus | None:
        return next_route_status(self.rest, endpoint, seen, seconds)

    def apply_rules(self, endpoint: EndpointSettings, rule_object: dict[str, Any]) -> bool:
        """Apply the endpoint's ``PrometheusRule`` as :meth:`apply` does (validated against its CRD); changed?"""
        return self.apply(endpoint, RenderedManifest.of([rule_object])).changed

    # -- observation ----------------------------------------------------------------------------------

    def observe(self, endpoint: EndpointSettings) -> Observed | None:
        """What the cluster runs on ``endpoint`` now and what its route admits; None when it cannot be read."""
        return observation.observe(self.rest, endpoint, admission_configmap=admission_configmap_name(endpoint))

    def read_manifest(self, endpoint: EndpointSettings, manifest: RenderedManifest) -> Observed:
        """What a stored manifest would run on ``endpoint``, read as :meth:`observe` reads the cluster."""
        return observation.manifest_observed(manifest.objects, endpoint)

    def health(self, endpoint: EndpointSettings) -> WorkloadHealth | None:
        """The endpoint's pods and their nodes now (the metrics watch); None when the cluster cannot be read."""
        return read_health(self.rest, endpoint)

    def cold_start(self, endpoint: EndpointSettings, first_completion_s: float | None) -> ColdStart | None:
        """Image pull, weight transfer and load times of the newest pod (``StartupReader``); None when unreadable."""
        return read_cold_start(self.rest, endpoint, first_completion_s, container=observation.VLLM_CONTAINER)

    # -- availability drills (``DrillActions``) -------------------------------------------------------

    def delete_pods(self, endpoint: EndpointSettings) -> list[str]:
        return drilling.delete_pods(self.rest, endpoint)

    def cordon(self, endpoint: EndpointSettings, nodes: Sequence[str], cordoned: bool) -> None:
        drilling.cordon(self.rest, nodes, cordoned)

    def drill_variant(self, endpoint: EndpointSettings, manifest: RenderedManifest, kind: str) -> RenderedManifest:
        return drilling.variant(manifest, endpoint, kind)
