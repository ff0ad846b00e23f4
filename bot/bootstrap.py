"""The composition root: builds settings, the store and the adapters once per process.

Entrypoints (CLI, Slack app, scheduler) ask for a :class:`Context` and hand it to
services; nothing else constructs engines or clients. :func:`build_context` with
``connect=True`` (what the CLI, ``serve`` and ``jobs start`` use) installs the
production adapters of :func:`production_adapters`; tests and the sandbox give
the same adapter classes pointed at local stand-ins instead. Every adapter makes
its network clients on first use, so a command that never reaches AWS or a
cluster never needs credentials for them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from bot.adapters.clock import Clock, SystemClock
from bot.adapters.store import UnitOfWorkFactory, make_engine
from bot.adapters.store.models import Endpoint
from bot.adapters.store.schema import check_schema
from bot.config import Settings, load_settings


@dataclass
class Context:
    """Everything a service needs: settings, a unit-of-work factory, a clock, and adapters."""

    settings: Settings
    uow: UnitOfWorkFactory
    clock: Clock = field(default_factory=SystemClock)
    adapters: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        self.uow.engine.dispose()


def build_context(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    check: bool = True,
    connect: bool = False,
    **adapters: Any,
) -> Context:
    """Connect to the configured database, verify its schema and sync declared endpoints.

    ``connect`` adds the production adapters for every port not given in ``adapters``.
    """
    settings = settings or load_settings()
    clock = clock or SystemClock()
    engine = make_engine(settings.effective_database_url)
    if check:
        check_schema(engine, auto_migrate=settings.auto_migrate)
    if connect:
        adapters = {**production_adapters(settings, clock), **adapters}
    ctx = Context(settings=settings, uow=UnitOfWorkFactory(engine), clock=clock, adapters=adapters)
    if check:
        sync_endpoints(ctx)
    return ctx


def production_adapters(settings: Settings, clock: Clock) -> dict[str, Any]:
    """The real adapter behind each port, reaching AWS, the clusters and the endpoints.

    AWS credentials come from the standard chain (IRSA in the cluster, a profile
    locally); ``AWS_ENDPOINT_URL`` still redirects boto3. Clusters come from each
    endpoint's kubeconfig context (in-cluster service account by default). The
    notifier is not here: the Slack app adds it. With ``SLACK_BOT_TOKEN`` set, a
    user-group directory lets the CLI honour roles granted through Slack user groups.
    """
    from bot.adapters.aws.artifacts import RegionalArtifactVerifier
    from bot.adapters.aws.reservations import AwsReservationSource
    from bot.adapters.aws.session import default_region
    from bot.adapters.cluster import ContextClusters
    from bot.adapters.endpoint import HttpEndpointClient
    from bot.adapters.endpoint.evaluation import HttpEvaluator
    from bot.adapters.endpoint.loadgen import HttpLoadGenerator
    from bot.services import ports

    endpoint = HttpEndpointClient()
    adapters: dict[str, Any] = {}
    if settings.slack_bot_token:  # the CLI resolves roles granted through Slack user groups too
        adapters[ports.DIRECTORY] = group_directory(settings, settings.slack_bot_token)
    return adapters | {
        ports.ARTIFACTS: RegionalArtifactVerifier(default_region(settings.aws_regions[0] if settings.aws_regions else None)),
        ports.CLUSTER: ContextClusters(poll_seconds=settings.rollout_poll_seconds, clock=clock),
        ports.RESERVATIONS: AwsReservationSource(),
        ports.ENDPOINT: endpoint,
        ports.EVALUATOR: HttpEvaluator(),
        ports.LOADGEN: HttpLoadGenerator(metrics=endpoint.metrics),
    }


def group_directory(settings: Settings, token: str) -> Any:
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
                uow.audit.record(at=now, actor="system", action="endpoint.declared", subject=f"endpoint:{spec.name}", details=data)
                changed = True
            elif row.settings != data or row.url != spec.url or row.kind != spec.kind:
                row.kind, row.environment, row.namespace, row.url, row.settings = (
                    spec.kind, spec.environment, spec.namespace, spec.url, data,
                )
                uow.audit.record(at=now, actor="system", action="endpoint.settings_changed", subject=f"endpoint:{spec.name}", details=data)
                changed = True
        if changed:
            uow.commit()
