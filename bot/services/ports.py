"""What the services need from the outside world, as protocols the adapters implement.

The composition root (:mod:`bot.bootstrap`) puts one implementation of each in
the typed :class:`bot.services.context.Ports` of the Context; tests and the
sandbox give the same real adapters pointed at local stand-ins.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from bot.config import EndpointSettings
from bot.domain.admission import Admission, RouteStatus
from bot.domain.checks import Check
from bot.domain.coldstart import ColdStart
from bot.domain.doors import DoorPath
from bot.domain.drift import Observed
from bot.domain.evaluation import Answer, EvalCase
from bot.domain.governance import ArtifactPolicy
from bot.domain.health import GpuSnapshot, WorkloadHealth
from bot.domain.own_requests import OwnLedger
from bot.domain.ramp import Window
from bot.domain.readiness import MetricsSnapshot, ReadinessResult
from bot.domain.release import ReleaseManifest
from bot.domain.reservations import ReservationInfo
from bot.domain.rollout import (
    ApplyResult,
    RenderedManifest,
    RolloutOutcome,
    RolloutProgress,
)
from bot.domain.sweep import LevelStats, Objectives, SweepOutcome, SweepPlan
from bot.domain.workload import Workload


class ObjectiveCheck(Protocol):
    """Whether what users got from one endpoint during a soak window kept its service objectives.

    The ramp asks it for each side it soaks; until the service objectives of the observability work are
    plugged in here, :class:`bot.services.objectives.RampObjectives` reads the endpoint's ramp settings.
    """

    def breaches(self, endpoint: EndpointSettings, window: Window) -> list[str]:
        """Each objective the window broke, as a short phrase with the measured value and the bound."""
        ...


class ArtifactVerifier(Protocol):
    """Checks a release tuple against S3 and the image registry (artifact gate)."""

    def verify(self, release: ReleaseManifest, policy: ArtifactPolicy | None = None) -> list[Check]:
        """Every artifact check, judged for the endpoint ``policy`` describes (``None``: no endpoint, nothing recorded)."""
        ...

    def verify_weights(self, release: ReleaseManifest) -> list[Check]:
        """Only the per-object size and SHA-256 checks (re-run before a rollback)."""
        ...


@runtime_checkable
class ReadsDocuments(Protocol):
    """A verifier that can read a small document the release names (its evaluation report) from S3."""

    def read_document(self, uri: str, max_bytes: int) -> bytes | None:
        """The object's bytes (at most ``max_bytes``, else an error), or ``None`` when it does not exist."""
        ...


@runtime_checkable
class ReportsProgress(Protocol):
    """A verifier that can report streaming progress (``kimi-ops release verify`` prints it)."""

    def with_progress(self, progress: Callable[[str, int, int], None] | None) -> ArtifactVerifier: ...


class Cluster(Protocol):
    """Renders, validates, applies and follows Kimi K3 on HyperPod or EKS."""

    def render(self, release: ReleaseManifest, endpoint: EndpointSettings, release_hash: str) -> RenderedManifest:
        """Render and validate; raises ``bot.adapters.cluster.InvalidManifest`` listing schema paths."""
        ...

    def preflight(self, endpoint: EndpointSettings) -> list[Check]: ...

    def doors(self, endpoint: EndpointSettings, manifest: RenderedManifest) -> list[DoorPath]:
        """Every way to the model pods once ``manifest`` is applied: the route (or declared application layer) first,
        then each Service, Ingress, HTTPRoute, SageMaker endpoint or ingress policy that opens another."""
        ...

    def apply(self, endpoint: EndpointSettings, manifest: RenderedManifest, force: bool = False) -> ApplyResult: ...

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
        """Follow the rollout to a verdict, telling its progress; events last seen before ``since`` (this
        deployment's apply) are an earlier deployment's and are not told."""
        ...

    def set_admission(self, endpoint: EndpointSettings, open_: bool, reason: str) -> int:
        """Write the admission ConfigMap (an endpoint without a route); returns the generation written."""
        ...

    def admission_enforced(self, endpoint: EndpointSettings) -> int | None:
        """The admission generation the application layer wrote back as enforced (``None``: never)."""
        ...

    def set_route(self, endpoint: EndpointSettings, admission: Admission, reason: str) -> RouteStatus:
        """Write the endpoint's HTTPRoute for ``admission`` (field manager ``kimi-ops-admission``) and read it back.

        Raises ``bot.adapters.cluster.RouteNotConfigured`` when the endpoint has no ``route`` settings and
        ``InvalidManifest`` for a share without a fallback. The returned status is the stored object's: a
        gateway's ``Accepted`` for the new generation comes later (``next_route_status``).
        """
        ...

    def route_status(self, endpoint: EndpointSettings) -> RouteStatus | None:
        """The route the cluster has now (annotation, rules and weights, parent conditions); None when none."""
        ...

    def next_route_status(self, endpoint: EndpointSettings, seen: RouteStatus, seconds: float) -> RouteStatus | None:
        """The route once the cluster's copy differs from ``seen`` (a gateway wrote its verdict), watching it; after
        ``seconds`` without a change, as it is then. None when the endpoint has no route."""
        ...

    def observe(self, endpoint: EndpointSettings) -> Observed | None:
        """What the cluster runs on the endpoint now, to set beside the database's record (``drift.compare``).

        Release name, tuple hash, image and request limits of the applied workload object (HyperPod's
        InferenceEndpointConfig, EKS's Deployment and pod template) and the route's admission and
        parents' verdict; ``None`` fields where the cluster has nothing. Returns ``None`` (unknown) when
        the cluster cannot be read, quickly and logged; never raises.
        """
        ...

    def read_manifest(self, endpoint: EndpointSettings, manifest: RenderedManifest) -> Observed:
        """What a stored manifest would run on the endpoint, read the way :meth:`observe` reads the cluster.

        Pure (no cluster access): status uses it for kimi-ops's record, so a drift is the cluster's difference.
        """
        ...


class EndpointClient(Protocol):
    """Talks to the endpoint's OpenAI-compatible API and its Prometheus metrics."""

    def readiness(self, endpoint: EndpointSettings) -> ReadinessResult: ...

    def metrics(self, endpoint: EndpointSettings) -> MetricsSnapshot: ...

    def drain(self, endpoint: EndpointSettings, timeout_seconds: float,
              stop: threading.Event | None = None) -> tuple[bool, MetricsSnapshot | None]:
        """Wait until no request runs or waits, the deadline, or ``stop``; ``(drained, last snapshot)``."""
        ...


class Evaluator(Protocol):
    """Sends the model gate's evaluation cases to an endpoint (bounded concurrency)."""

    def run(self, endpoint: EndpointSettings, cases: Sequence[EvalCase], *, concurrency: int, timeout: float,
            ledger: OwnLedger | None = None, stop: threading.Event | None = None) -> list[Answer]:
        """One answer per case; once ``stop`` is set no case is sent and the streams under way are cut."""


class LoadGenerator(Protocol):
    """Runs the traffic gate's bounded concurrency sweep against an endpoint."""

    def sweep(self, endpoint: EndpointSettings, plan: SweepPlan, objectives: Objectives,
              on_level: Callable[[LevelStats], None] | None = None, ledger: OwnLedger | None = None,
              workload: Workload | None = None, stop: threading.Event | None = None) -> SweepOutcome:
        """``workload``: what to send (production's mix synthesised); None sends the plan's fixed prompt. Once
        ``stop`` is set the sweep sends nothing more, cuts the streams under way and returns what it measured."""


class ReservationSource(Protocol):
    """Reads Capacity Blocks and HyperPod training plans from AWS."""

    def capacity_blocks(self, region: str, instance_type: str) -> list[ReservationInfo]: ...

    def training_plans(self, region: str) -> list[ReservationInfo]: ...


class Directory(Protocol):
    """Which role-relevant Slack user groups a person belongs to (roles may name ``S…`` groups)."""

    def groups_of(self, user_id: str) -> frozenset[str]: ...


@runtime_checkable
class WorkloadReader(Protocol):
    """A cluster adapter that can say how the endpoint's pods and nodes are (the metrics watch)."""

    def health(self, endpoint: EndpointSettings) -> WorkloadHealth | None:
        """Pods (restarts, waiting reasons, last termination) and their nodes' conditions; None when unreadable."""
        ...


@runtime_checkable
class RuleApplier(Protocol):
    """A cluster adapter that can apply an endpoint's ``PrometheusRule`` (server-side apply, kimi-ops's manager)."""

    def apply_rules(self, endpoint: EndpointSettings, rule_object: dict[str, Any]) -> bool:
        """Validate and apply ``rule_object`` in the endpoint's namespace; whether the server's copy changed."""
        ...


class AlertSilences(Protocol):
    """Alertmanager's API v2: silences, and the alerts it holds.

    Each call raises with a one-line reason when Alertmanager refuses or cannot be reached.
    """

    def create_silence(self, matchers: dict[str, str], starts: dt.datetime, ends: dt.datetime, created_by: str,
                       comment: str) -> str:
        """Silence alerts whose labels equal ``matchers``; the new silence's id."""
        ...

    def active_fingerprints(self, matchers: dict[str, str]) -> set[str]:
        """Fingerprints of the alerts Alertmanager holds now whose labels equal ``matchers`` (silenced ones too)."""
        ...


class GpuTelemetry(Protocol):
    """Reads an NVIDIA DCGM exporter's ``/metrics``; raises with a one-line reason when it cannot."""

    def read(self, url: str) -> GpuSnapshot: ...


@runtime_checkable
class StartupReader(Protocol):
    """A cluster adapter that can say how long the newest pod took to start (a rollout's cold start)."""

    def cold_start(self, endpoint: EndpointSettings, first_completion_s: float | None) -> ColdStart | None: ...


@runtime_checkable
class DrillActions(Protocol):
    """A cluster adapter that can inject an availability drill's faults (and undo the ones it lifts).

    The manifest variants are applied, and undone, through :meth:`Cluster.apply` like any release.
    """

    def delete_pods(self, endpoint: EndpointSettings) -> list[str]:
        """Delete the endpoint's model pods; the names deleted."""
        ...

    def cordon(self, endpoint: EndpointSettings, nodes: Sequence[str], cordoned: bool) -> None:
        """Mark ``nodes`` unschedulable (or schedulable again)."""
        ...

    def drill_variant(self, endpoint: EndpointSettings, manifest: RenderedManifest, kind: str) -> RenderedManifest:
        """The stored ``manifest`` made to fail as the drill ``kind`` says (model-load-failure, artifact-outage, bad-release)."""
        ...
