"""The composition root: builds settings, the store, the adapters and the engine once per process.

:func:`build_context` makes the :class:`~bot.services.context.Context` every
service receives; with ``connect=True`` (what the CLI, ``serve`` and ``jobs
start`` use) the production adapters of :func:`production_adapters` fill every
port not given; tests and the sandbox give the same adapter classes pointed at
local stand-ins instead. Every adapter makes its network clients on first use,
so a command that never reaches AWS or a cluster never needs credentials for them.

:func:`build_root` then makes the process's one :class:`Root` (the Context, its
deployment engine and, where Slack is configured, the outbox notifier), which is
handed to the Slack app, the CLI commands and the scheduler (through
:mod:`bot.runtime`). Nothing else constructs engines or clients.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from bot.adapters.clock import Clock, SystemClock
from bot.adapters.store import UnitOfWorkFactory, make_engine
from bot.adapters.store.models import Endpoint
from bot.adapters.store.schema import check_schema
from bot.config import Settings, load_settings
from bot.services.context import Context, Ports
from bot.services.ports import (
    AlertSilences,
    ArtifactVerifier,
    Cluster,
    Directory,
    EndpointClient,
    Evaluator,
    GpuTelemetry,
    LoadGenerator,
    ReservationSource,
)

T = TypeVar("T")

if TYPE_CHECKING:  # these load only when a process needs them (most CLI commands need none)
    from bot.adapters.endpoint import HttpEndpointClient
    from bot.adapters.slack.notifier import SlackNotifier
    from bot.services.engine import Engine


@dataclass(frozen=True)
class Root:
    """The one object per process that entrypoints receive: the Context, its engine, the notifier.

    One engine per process, so a rollout watch it runs can be stopped (``/kimi
    cancel``, shutdown). ``notifier`` is there where Slack is configured (the
    Slack app, ``kimi-ops shell``), ``None`` otherwise.
    """

    ctx: Context
    engine: Engine
    notifier: SlackNotifier | None = None


def build_context(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    check: bool = True,
    connect: bool = False,
    ports: Ports | None = None,
    artifacts: ArtifactVerifier | None = None,
    cluster: Cluster | None = None,
    endpoint: EndpointClient | None = None,
    reservations: ReservationSource | None = None,
    evaluator: Evaluator | None = None,
    loadgen: LoadGenerator | None = None,
    directory: Directory | None = None,
) -> Context:
    """Connect to the configured database, verify its schema and sync declared endpoints.

    Adapters come from ``ports`` and the port keywords (a keyword wins over
    ``ports``); ``connect`` adds the production adapter for every port still unset.
    """
    settings = settings or load_settings()
    clock = clock or SystemClock()
    given = Ports(artifacts=artifacts, cluster=cluster, endpoint=endpoint, reservations=reservations,
                  evaluator=evaluator, loadgen=loadgen, directory=directory).over(ports or Ports())
    if check:
        settings.ensure_data_dir()  # reports and the embedded database live there: refuse now, not mid-gate
    engine = make_engine(settings.effective_database_url, pool_size=settings.db_pool_size,
                         max_overflow=settings.db_max_overflow)
    if check:
        check_schema(engine, auto_migrate=settings.auto_migrate)
    if connect:
        given = given.over(production_adapters(settings, clock))
    ctx = Context(settings=settings, uow=UnitOfWorkFactory(engine), clock=clock, ports=given)
    if check:
        sync_endpoints(ctx)
    return ctx


def build_root(ctx: Context, *, slack_token: str | None = None, readiness_pause: float | None = None) -> Root:
    """The process's root on ``ctx``; ``slack_token`` (a bot token) adds the outbox notifier.

    ``readiness_pause`` (seconds between readiness attempts) is the engine's
    default unless a test or the sandbox wants it shorter.
    """
    from bot.services.engine import READINESS_PAUSE_SECONDS, Engine

    notifier = None
    if slack_token:
        from bot.adapters.slack.identity import web_client
        from bot.adapters.slack.notifier import SlackNotifier

        notifier = SlackNotifier(web_client(slack_token, ctx.settings.slack_api_url), ctx.uow, ctx.clock,
                                 plot_dir=ctx.settings.data_dir / "reports")
    pause = READINESS_PAUSE_SECONDS if readiness_pause is None else readiness_pause
    return Root(ctx=ctx, engine=Engine(ctx, readiness_pause=pause), notifier=notifier)


class FirstUse(Generic[T]):
    """A port whose adapter is built, and its module imported, when the port is first used.

    boto3, the kubernetes client and kubernetes-validate take about a second to import; a command that never
    reaches AWS or a cluster (``history``, ``release list``, the Slack app answering ``/kimi help``) must not
    pay for them. Every attribute is the built adapter's; building is once per process, under a lock.
    """

    def __init__(self, build: Callable[[], T]) -> None:
        self._build: Callable[[], T] | None = build
        self._built: T | None = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        return self._build is None

    def adapter(self) -> T:
        with self._lock:
            if self._build is not None:
                self._built, self._build = self._build(), None
            return self._built  # type: ignore[return-value]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.adapter(), name)

    def __repr__(self) -> str:
        return f"FirstUse({self._built!r})" if self.built else "FirstUse(not built yet)"


def production_adapters(settings: Settings, clock: Clock) -> Ports:
    """The real adapter behind each port, reaching AWS, the clusters and the endpoints, each built on first use.

    AWS credentials come from the standard chain (IRSA in the cluster, a profile
    locally); ``AWS_ENDPOINT_URL`` still redirects boto3. Clusters come from each
    endpoint's kubeconfig context (in-cluster service account by default). The
    notifier is not here: :func:`build_root` adds it. With ``SLACK_BOT_TOKEN`` set, a
    user-group directory lets the CLI honour roles granted through Slack user groups.
    """

    def artifacts() -> ArtifactVerifier:
        from bot.adapters.aws.artifacts import RegionalArtifactVerifier
        from bot.adapters.aws.session import default_region

        return RegionalArtifactVerifier(default_region(settings.aws_regions[0] if settings.aws_regions else None))

    def cluster() -> Cluster:
        from bot.adapters.cluster import ContextClusters

        return ContextClusters(poll_seconds=settings.rollout_poll_seconds, clock=clock)

    def reservations() -> ReservationSource:
        from bot.adapters.aws.reservations import AwsReservationSource

        return AwsReservationSource()

    def endpoint_client() -> HttpEndpointClient:
        from bot.adapters.endpoint import HttpEndpointClient

        return HttpEndpointClient()  # the process's one: probes and scrapes share its HTTP client

    def evaluator() -> Evaluator:
        from bot.adapters.endpoint.evaluation import HttpEvaluator

        return HttpEvaluator()

    def gpus() -> GpuTelemetry:
        from bot.adapters.endpoint.dcgm import HttpGpuTelemetry

        return HttpGpuTelemetry()

    def silences() -> AlertSilences:
        from bot.adapters.alertmanager import HttpAlertmanager

        return HttpAlertmanager(str(settings.alertmanager_url))

    endpoint = FirstUse(endpoint_client)

    def loadgen() -> LoadGenerator:
        from bot.adapters.endpoint.loadgen import HttpLoadGenerator

        return HttpLoadGenerator(metrics=endpoint.adapter().peak_metrics)

    return Ports(
        artifacts=cast(ArtifactVerifier, FirstUse(artifacts)),
        cluster=cast(Cluster, FirstUse(cluster)),
        reservations=cast(ReservationSource, FirstUse(reservations)),
        endpoint=cast(EndpointClient, endpoint),
        evaluator=cast(Evaluator, FirstUse(evaluator)),
        loadgen=cast(LoadGenerator, FirstUse(loadgen)),
        gpus=cast(GpuTelemetry, FirstUse(gpus)),
        silences=cast(AlertSilences, FirstUse(silences)) if settings.alertmanager_url else None,
        # The CLI resolves roles granted through Slack user groups too.
        directory=group_directory(settings, settings.slack_bot_token) if settings.slack_bot_token else None,
    )


def group_directory(settings: Settings, token: str) -> Directory:
    """Slack user groups named in the roles, read with ``token`` (at ``KIMI_SLACK_API_URL`` if set)."""
    from bot.adapters.slack.identity import GroupDirectory, web_client

    return GroupDirectory(web_client(token, settings.slack_api_url), settings.roles.members)


def sync_endpoints(ctx: Context) -> None:
    """Make the database's endpoints match the settings file (adds new, updates changed settings)."""
    now: dt.datetime = ctx.clock.now()
    with ctx.uow() as uow:
        changed = False
        for spec in ctx.settings.endpoints:
            data = spec.model_dump(mode="json")
            row = uow.endpoints.get(spec.name)
            if row is not None and (row.settings or {}).get("accepted_request_limits"):
                # Limits an approver accepted from a traffic gate outlive the YAML file's re-sync.
                data["accepted_request_limits"] = row.settings["accepted_request_limits"]
            if row is None:
                uow.endpoints.add(
                    Endpoint(
                        name=spec.name,
                        kind=spec.kind,
                        environment=spec.environment,
                        namespace=spec.namespace,
                        url=spec.url,
                        admission_open=True,
                        settings=data,
                        created_at=now,
                    )
                )
                uow.audit.record(at=now, actor="system", action="endpoint.declared",
                                 subject=f"endpoint:{spec.name}", details=data)
                changed = True
            elif row.settings != data or row.url != spec.url or row.kind != spec.kind:
                row.kind, row.environment, row.namespace, row.url, row.settings = (
                    spec.kind, spec.environment, spec.namespace, spec.url, data,
                )
                uow.audit.record(at=now, actor="system", action="endpoint.settings_changed",
                                 subject=f"endpoint:{spec.name}", details=data)
                changed = True
        if changed:
            uow.commit()
