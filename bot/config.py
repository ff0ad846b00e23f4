"""The one place settings come from.

``Settings`` reads environment variables prefixed ``KIMI_`` (plus Slack's own
``SLACK_*`` names) and, when ``KIMI_CONFIG`` names a YAML file, endpoints and
roles from it. Environment variables win over the file. Nothing else in the
code base reads ``os.environ``.

A bad setting raises :class:`ConfigError` whose message is one line naming the
setting, what is wrong and an example of a good value; the CLI (and ``serve``
at start) prints it and exits with status 2. List settings take JSON
(``["us-east-1"]``) or the comma-separated form people write
(``us-east-1,us-west-2``). The ``KIMI_CONFIG`` file and the evaluation set are
read at start, within size and alias limits (:mod:`bot.safe_yaml`), and must
parse.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from bot.config_error import ConfigError as ConfigError  # re-exported: callers import it from here
from bot.domain.capture import DataCapture
from bot.domain.egress import REQUIRED as REQUIRED_EGRESS
from bot.domain.egress import EgressPolicy
from bot.domain.evaluation import EvalSetError, parse_eval_set
from bot.domain.slo import SloSettings
from bot.domain.sweep import Objectives, SweepPlan
from bot.route_config import DNS_LABEL, MODEL_PORT, CohortHeader, GatewayParent, RouteSettings, ServiceBackend
from bot.safe_yaml import YamlFileError, load_yaml_file, load_yaml_text, read_text_file

Role = Literal["viewer", "deployer", "approver", "admin"]
EndpointKind = Literal["hyperpod", "eks"]


CONFIG_MAX_BYTES = 1024 * 1024
EVALUATION_SET_MAX_BYTES = 4 * 1024 * 1024
AWS_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d{1,2}$")
IAM_ROLE_ARN = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]+$"
PositiveHours = Annotated[float, Field(gt=0, le=24 * 366)]
# What a good value looks like, appended to every message about the setting.
EXAMPLES: dict[str, str] = {
    "aws_regions": "KIMI_AWS_REGIONS=us-east-1,us-west-2",
    "alert_thresholds_hours": "KIMI_ALERT_THRESHOLDS_HOURS=168,72,24,6,1",
    "roles": """KIMI_ROLES='{"approver": ["U0APPROVER"], "admin": ["S0ADMINS"]}'""",
    "endpoints": "endpoints: in the KIMI_CONFIG file (see deploy/kimi-ops.example.yaml)",
    "services": "services: [{name: kimi, sides: [kimi-blue, kimi-green], route: {gateway: {name: public}}}] in KIMI_CONFIG",
    "database_url": "KIMI_DATABASE_URL=postgresql+psycopg://kimi@db.internal:5432/kimi",
    "data_dir": "KIMI_DATA_DIR=/var/lib/kimi-ops",
    "evaluation_set": "KIMI_EVALUATION_SET=deploy/evaluation/kimi-k3-default.yaml",
    "log_format": "KIMI_LOG_FORMAT=json",
    "log_level": "KIMI_LOG_LEVEL=INFO",
    "auto_migrate": "KIMI_AUTO_MIGRATE=1",
    "readiness_failures_to_alert": "KIMI_READINESS_FAILURES_TO_ALERT=3",
    "reservation_watch_minutes": "KIMI_RESERVATION_WATCH_MINUTES=15",
    "readiness_probe_minutes": "KIMI_READINESS_PROBE_MINUTES=5",
    "metrics_watch_minutes": "KIMI_METRICS_WATCH_MINUTES=1",
    "drill_period_days": "KIMI_DRILL_PERIOD_DAYS=30",
    "drill_poll_seconds": "KIMI_DRILL_POLL_SECONDS=15",
    "drill_timeout_minutes": "KIMI_DRILL_TIMEOUT_MINUTES=60",
    "probe_concurrency": "KIMI_PROBE_CONCURRENCY=16",
    "rollout_poll_seconds": "KIMI_ROLLOUT_POLL_SECONDS=5",
    "traffic_sweep": """KIMI_TRAFFIC_SWEEP='{"ceiling": 64}'""",
    "traffic_objectives": """KIMI_TRAFFIC_OBJECTIVES='{"ttft_p95_ms": 2000}'""",
}


class RequestLimits(BaseModel):
    """Per-pod admission limits (HyperPod ``worker.requestLimits``)."""

    model_config = ConfigDict(extra="forbid")

    max_concurrent_requests: int = Field(default=8, ge=1, le=10_000)
    max_queue_size: int = Field(default=16, ge=0, le=100_000)
    overflow_status_code: Literal[429, 503] = 429


class RampSettings(BaseModel):
    """How users meet a candidate after its traffic gate: the internal cohort, then these shares, each soaked."""

    model_config = ConfigDict(extra="forbid")

    steps: list[int] = Field(default_factory=lambda: [10, 50],
                             description="Shares (1-99 %) of ordinary traffic after the cohort.")
    soak_seconds: float = Field(default=300, ge=0, le=86_400,
                                description="How long each step is held while its objectives are read.")
    sample_seconds: float = Field(default=10, gt=0, le=600, description="How often /metrics is read during a soak.")
    error_rate: float = Field(default=0.01, ge=0, le=1, description="5xx share of user requests a step may see.")
    queue_depth: float = Field(default=8, ge=0, description="Requests waiting in vLLM a step may see.")
    kv_cache_usage: float = Field(default=0.95, gt=0, le=1)
    approval_steps: list[int] = Field(default_factory=list, description="Shares (1-100 %; 100 = everyone) the ramp "
                                      "moves to only once an approver says so (`/kimi ramp approve N STEP`).")

    @field_validator("approval_steps")
    @classmethod
    def _approval_shares(cls, steps: list[int]) -> list[int]:
        if any(not 1 <= s <= 100 for s in steps):
            raise ValueError("ramp approval steps are shares from 1 to 100 (100: before everyone reaches the candidate)")
        return sorted(set(steps))

    @field_validator("steps")
    @classmethod
    def _shares(cls, steps: list[int]) -> list[int]:
        if any(not 1 <= s <= 99 for s in steps):
            raise ValueError("ramp steps are shares from 1 to 99 (percent of ordinary traffic); the ramp ends open by itself")
        return sorted(set(steps))


class PairSide(BaseModel):
    """Filled in from ``services:``: the service an endpoint is one side of, and the other side."""

    model_config = ConfigDict(extra="forbid")

    service: str
    partner: str


class EndpointSettings(BaseModel):
    """One serving target, as an operator declares it in the ``KIMI_CONFIG`` file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    kind: EndpointKind = "hyperpod"
    environment: str = "prod"
    namespace: str = "model-serving"
    cluster_context: str | None = None
    url: str = "http://127.0.0.1:8000"
    served_model_name: str = "Kimi-K3"
    channel: str | None = None
    region: str = "us-east-1"
    instance_type: str = "p6-b300.48xlarge"
    availability_zone: str | None = None
    reservation_id: str | None = None
    request_limits: RequestLimits = Field(default_factory=RequestLimits)
    # Written by an approver accepting the traffic gate's proposal; kept across restarts by sync_endpoints.
    accepted_request_limits: RequestLimits | None = None
    warmup_minutes: int = Field(default=45, ge=0)
    soak_minutes: int = Field(default=120, ge=0)
    rollout_window_minutes: int = Field(default=240, ge=0)
    max_deploy_seconds: int = Field(default=3600, ge=60)
    ttft_objective_ms: int = Field(default=2000, ge=1)
    separate_approver: bool | None = None
    client_namespaces: list[str] = Field(
        default_factory=lambda: ["kimi-ops"],
        description="Namespaces besides the endpoint's own allowed to reach its API port (EKS NetworkPolicy).",
    )
    rollback_approvals: int = Field(default=1, ge=0, le=4)
    # The Gateway API HTTPRoute kimi-ops keeps in front of the endpoint (bot/route_config.py); None: no route.
    route: RouteSettings | None = None
    route_accept_seconds: float = Field(default=60, gt=0, le=3600,
                                        description="How long the gateway may take to accept a route change.")
    drain_seconds: float = Field(default=600, gt=0, le=86_400,
                                 description="How long closed admission waits for requests to finish.")
    ramp: RampSettings = Field(default_factory=RampSettings)
    gate_wait_before_apply_minutes: float = Field(default=24 * 60, gt=0, description="A gate waits this long before apply.")
    gate_wait_after_apply_minutes: float = Field(default=30, gt=0,
                                                 description="A gate waits this long once users are closed out.")
    approver_group: str | None = Field(default=None, pattern=r"^S[A-Z0-9]+$",
                                       description="Slack user group reminded of waiting gates.")
    inference_roles: list[Annotated[str, Field(pattern=IAM_ROLE_ARN)]] = Field(
        default_factory=list,
        description="IAM role ARN(s) the model pods read the weights with; the weights bucket's policy may let only "
        "these read (artifact gate, bucket.policy).",
    )
    exposure: Literal["internal", "third-party", "maas"] = Field(
        default="internal",
        description="Who the endpoint serves: internal users, a third-party product, or Model-as-a-Service; a licence "
        "review holds only for the exposure it classified.",
    )
    egress: EgressPolicy | None = Field(
        default=None,
        description="Where HyperPod model pods may connect: weights_cidrs, telemetry, control_plane_cidrs (required on "
        "a production HyperPod endpoint; without it, HTTPS anywhere but the credential addresses).",
    )
    data_capture: DataCapture = Field(
        default_factory=DataCapture,
        description="What the endpoint captures of its traffic (default: the load balancer's access logs, no payloads).",
    )
    max_model_len: int = Field(
        default=262_144, ge=1, le=1_048_576,
        description="Longest context (tokens) a release may offer on this endpoint: its --max-model-len must be at most this.",
    )
    pair: PairSide | None = Field(default=None, description="Derived from services: (never set by hand).")
    # After go-live (the metrics watch): objectives and budgets, and the node's DCGM exporter if it has one.
    slo: SloSettings = Field(default_factory=SloSettings)
    dcgm_url: str | None = Field(default=None, description="URL of the node's NVIDIA DCGM exporter /metrics.")
    gpus: int = Field(default=8, ge=1, le=64, description="GPUs the node should report to DCGM.")

    @model_validator(mode="before")
    @classmethod
    def _legacy_egress(cls, data: Any) -> Any:
        """``egress_cidrs`` was replaced by ``egress``; rows stored before hold its old default, which means nothing."""
        if isinstance(data, dict) and "egress_cidrs" in data:
            data = dict(data)
            if data.pop("egress_cidrs") not in (["0.0.0.0/0"], []):
                raise ValueError(f"egress_cidrs was replaced by {REQUIRED_EGRESS}")
        return data

    @model_validator(mode="after")
    def _route_backends(self) -> EndpointSettings:
        if self.route is not None:
            self.route.check_for(self.name)
        return self

    @property
    def requires_separate_approver(self) -> bool:
        """Self-approval is refused by default on production endpoints."""
        if self.separate_approver is not None:
            return self.separate_approver
        return self.environment == "prod"

    @property
    def effective_request_limits(self) -> RequestLimits:
        """The limits to render: those accepted from a traffic gate, else the declared ones."""
        return self.accepted_request_limits or self.request_limits

    @property
    def sagemaker_instance_type(self) -> str:
        return self.instance_type if self.instance_type.startswith("ml.") else f"ml.{self.instance_type}"


class ServiceSide(BaseModel):
    """One side of a service: an endpoint (its own node and reservation) and the Service the route sends to."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str
    backend: ServiceBackend | None = Field(default=None, description="Default: named after the endpoint, port 8000.")


class ServiceRoute(BaseModel):
    """The service's one HTTPRoute: where it attaches and who the internal cohort is (the sides are its backends)."""

    model_config = ConfigDict(extra="forbid")

    gateway: GatewayParent
    hostnames: list[str] = Field(default_factory=list, max_length=16)
    cohort_header: CohortHeader = Field(default_factory=CohortHeader)


class ServiceSettings(BaseModel):
    """A name users call, one HTTPRoute, backed by a pair of endpoints (blue/green; DESIGN.md, "Pairs")."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    sides: list[str | ServiceSide] = Field(min_length=2, max_length=2,
                                           description="The two endpoints, each its own node and reservation.")
    route: ServiceRoute
    ramp: RampSettings = Field(default_factory=lambda: RampSettings(steps=[1, 5, 25, 50]),
                               description="Weight steps (1-99 %) shifted to the candidate side, each soaked.")

    @property
    def side_list(self) -> list[ServiceSide]:
        return [ServiceSide(endpoint=s) if isinstance(s, str) else s for s in self.sides]

    @property
    def endpoints(self) -> tuple[str, str]:
        first, second = (s.endpoint for s in self.side_list)
        return first, second

    def side_route(self, side: ServiceSide, partner: ServiceSide) -> RouteSettings:
        """The route as one side writes it: its Service is the model, the other side's is where the rest goes."""
        def backend(s: ServiceSide) -> ServiceBackend:
            return s.backend or ServiceBackend(name=s.endpoint, port=MODEL_PORT)

        return RouteSettings(name=self.name, gateway=self.route.gateway, hostnames=list(self.route.hostnames),
                             backend=backend(side), fallback=backend(partner), cohort_header=self.route.cohort_header)


class Roles(BaseModel):
    """Who may do what: Slack user IDs (``U…``/``W…``) or user-group IDs (``S…``)."""

    model_config = ConfigDict(extra="forbid")

    viewer: list[str] = Field(default_factory=list)
    deployer: list[str] = Field(default_factory=list)
    approver: list[str] = Field(default_factory=list)
    admin: list[str] = Field(default_factory=list)

    @property
    def members(self) -> set[str]:
        """Every user and user-group ID named in any role."""
        return {m for role in (self.viewer, self.deployer, self.approver, self.admin) for m in role}


class Settings(BaseSettings):
    """Every setting of kimi-ops; see the README's settings table."""

    model_config = SettingsConfigDict(env_prefix="KIMI_", extra="ignore", populate_by_name=True)

    data_dir: Path = Field(default=Path(".kimi-ops"), description="Directory for the embedded SQLite database and local state.")
    database_url: str | None = Field(default=None, description="SQLAlchemy URL of the release-history database.")
    # Three replicas plus a rolling update's extra pod at 10 + 10 each open at most 80 connections, inside
    # PostgreSQL's default max_connections=100 less its 3 superuser slots (DESIGN.md, "Connections").
    db_pool_size: int = Field(default=10, ge=1, le=200, description="PostgreSQL connections each process keeps open.")
    db_max_overflow: int = Field(
        default=10, ge=0, le=200, description="Extra PostgreSQL connections each process may open beyond the pool under load."
    )
    config: Path | None = Field(default=None, description="YAML file with `endpoints:` and `roles:`.")
    auto_migrate: bool = Field(default=False, description="Upgrade the database schema at start instead of refusing.")
    log_format: Literal["text", "json"] = Field(default="text", description="`json` in production, `text` locally.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    aws_regions: list[str] = Field(
        default_factory=lambda: ["us-east-1"], min_length=1, description="Regions watched for reservations."
    )
    cli_user: str | None = Field(default=None, description="Slack user ID the CLI acts as when --as is not given.")
    slack_api_url: str | None = Field(default=None, description="Base URL of the Slack Web API (tests, sandbox).")
    oncall_group: str | None = Field(default=None, description="Slack user group mentioned on escalations.")
    alert_thresholds_hours: list[PositiveHours] = Field(
        default_factory=lambda: [168.0, 72.0, 24.0, 6.0, 1.0], min_length=1,
        description="Hours before a reservation ends at which to warn; each positive.",
    )
    readiness_failures_to_alert: int = Field(default=3, ge=1)
    reservation_watch_minutes: int = Field(default=15, ge=1)
    readiness_probe_minutes: int = Field(default=5, ge=1)
    probe_concurrency: int = Field(
        default=16, ge=1, le=256,
        description="Endpoints a readiness probe or metrics watch run asks at once (500 one-second completions: ~32 s at 16).",
    )
    gate_expiry_minutes: int = Field(default=1, ge=1, description="How often waiting gates are checked for reminders and expiry.")
    metrics_watch_minutes: int = Field(default=1, ge=1, le=60,
                                       description="How often live endpoints' metrics, GPUs, pods and nodes are read.")
    rollout_poll_seconds: float = Field(
        default=5.0, gt=0, le=300, description="How often a rollout watch reads the cluster between watch events."
    )
    drill_period_days: int = Field(
        default=30, ge=1, le=3660,
        description="The infrastructure gate warns when no availability drill passed on the endpoint within this many days.",
    )
    drill_poll_seconds: float = Field(default=15.0, gt=0, le=300, description="How often a running drill looks at its endpoint.")
    drill_timeout_minutes: float = Field(
        default=60.0, gt=0, le=24 * 60, description="How long a drill waits for detection and recovery before it fails.",
    )
    # A crashed driver's deployment is taken over within lease_seconds + lease_takeover_seconds (default 20 s).
    lease_seconds: float = Field(
        default=15.0, gt=0, le=600, description="How long a replica's claim on an in-flight deployment lasts without a heartbeat."
    )
    lease_heartbeat_seconds: float = Field(
        default=5.0, gt=0, le=300, description="How often the driving replica renews its lease (well under lease_seconds)."
    )
    lease_takeover_seconds: float = Field(
        default=5.0, gt=0, le=300, description="How often every replica looks for in-flight deployments whose lease lapsed."
    )
    slack_bot_token: str | None = Field(default=None, validation_alias=AliasChoices("SLACK_BOT_TOKEN"))
    slack_signing_secret: str | None = Field(default=None, validation_alias=AliasChoices("SLACK_SIGNING_SECRET"))
    slack_app_token: str | None = Field(default=None, validation_alias=AliasChoices("SLACK_APP_TOKEN"))
    # Where Slack requests may come from; each left unset is learned from the bot token's auth.test at start.
    slack_allowed_team_ids: list[str] = Field(
        default_factory=list, description="Slack workspace IDs (T…) whose requests are served (default: the bot token's)."
    )
    slack_enterprise_id: str | None = Field(
        default=None, description="Enterprise Grid organisation ID (E…) requests must come from (default: the bot token's)."
    )
    slack_app_id: str | None = Field(default=None, description="This Slack app's ID (A…) (default: the bot token's).")
    slack_max_command_chars: int = Field(
        default=2000, ge=1, le=40_000, description="Longest `/kimi` text read; longer is refused before it is parsed."
    )
    endpoints: list[EndpointSettings] = Field(default_factory=list)
    capture_max_sampling_percent: int = Field(
        default=5, ge=1, le=100,
        description="Highest share of requests whose payloads an endpoint may capture (with a payload-capture exception).",
    )
    services: list[ServiceSettings] = Field(default_factory=list, description="Pairs of endpoints behind one route.")
    roles: Roles = Field(default_factory=Roles)
    evaluation_set: Path | None = Field(
        default=None, description="YAML evaluation set of the model gate (default: deploy/evaluation/kimi-k3-default.yaml)."
    )
    traffic_sweep: SweepPlan = Field(default_factory=SweepPlan, description="Bounds of the traffic gate's concurrency sweep.")
    traffic_objectives: Objectives = Field(
        default_factory=Objectives, description="Service objectives whose first breach is the knee."
    )

    @field_validator("aws_regions")
    @classmethod
    def _region_names(cls, value: list[str]) -> list[str]:
        for region in value:
            if not AWS_REGION.match(region):
                raise ValueError(f"{region[:40]!r} is not an AWS region name")
        return value

    @field_validator("evaluation_set")
    @classmethod
    def _evaluation_set_parses(cls, value: Path | None) -> Path | None:
        # Read at start: a typo in the path should stop the bot now, not fail the next model gate.
        if value is None:
            return None
        try:
            text = read_text_file(value, EVALUATION_SET_MAX_BYTES)
            load_yaml_text(text, str(value))  # size, alias and depth limits before the domain parses it
            parse_eval_set(text, source=str(value))
        except (YamlFileError, EvalSetError) as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("database_url")
    @classmethod
    def _known_driver(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        scheme = value.split(":", 1)[0]
        if scheme not in {"sqlite", "sqlite+pysqlite", "postgresql", "postgresql+psycopg"}:
            raise ValueError("use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB")
        return value

    @model_validator(mode="after")
    def _heartbeat_inside_lease(self) -> Settings:
        if self.lease_heartbeat_seconds * 2 > self.lease_seconds:
            raise ValueError("lease_heartbeat_seconds must be at most half of lease_seconds, so one missed beat keeps the lease")
        return self

    @model_validator(mode="after")
    def _unique_endpoints(self) -> Settings:
        names = [e.name for e in self.endpoints]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"endpoint names must be unique; repeated: {', '.join(dupes)}")
        return self

    @model_validator(mode="after")
    def _prod_egress(self) -> Settings:
        """A production HyperPod endpoint names where its model pods may connect; nothing is assumed open."""
        for endpoint in self.endpoints:
            if endpoint.kind == "hyperpod" and endpoint.environment == "prod" and endpoint.egress is None:
                raise ValueError(f"endpoint {endpoint.name} (HyperPod, prod) must name where its model pods may connect: "
                                 f"{REQUIRED_EGRESS}; see deploy/kimi-ops.example.yaml")
        return self

    @model_validator(mode="after")
    def _pairs(self) -> Settings:
        """Each side of a service gets the service's route (its Service first) and ramp, and knows its partner."""
        by_name = {e.name: e for e in self.endpoints}
        taken: dict[str, str] = {}
        for service in self.services:
            if service.name in by_name:
                raise ValueError(f"service {service.name} has the name of an endpoint; names users call must be distinct")
            sides = service.side_list
            first, second = service.endpoints
            if first == second:
                raise ValueError(f"service {service.name}: its two sides must be two endpoints, not {first} twice")
            for side, partner in ((sides[0], sides[1]), (sides[1], sides[0])):
                endpoint = by_name.get(side.endpoint)
                if endpoint is None:
                    raise ValueError(f"service {service.name}: no endpoint named {side.endpoint}; declare it under endpoints:")
                if side.endpoint in taken and taken[side.endpoint] != service.name:
                    raise ValueError(f"endpoint {side.endpoint} is a side of both {taken[side.endpoint]} and {service.name}")
                taken[side.endpoint] = service.name
                other = by_name[partner.endpoint]
                if (endpoint.namespace, endpoint.cluster_context) != (other.namespace, other.cluster_context):
                    raise ValueError(f"service {service.name}: {side.endpoint} and {partner.endpoint} must share a cluster "
                                     "and namespace (one HTTPRoute sends to both Services)")
                route = service.side_route(side, partner)
                pair = PairSide(service=service.name, partner=partner.endpoint)
                if endpoint.route is not None and endpoint.route != route:
                    raise ValueError(f"endpoint {side.endpoint} is a side of service {service.name}: its route comes "
                                     "from the service; remove its own route: block")
                by_name[side.endpoint] = endpoint.model_copy(update={"route": route, "ramp": service.ramp, "pair": pair})
        self.endpoints = [by_name[e.name] for e in self.endpoints]
        return self

    def service(self, name: str) -> ServiceSettings | None:
        return next((s for s in self.services if s.name == name), None)

    @property
    def effective_database_url(self) -> str:
        """The configured URL, or a SQLite file under ``data_dir`` (created on first use)."""
        if self.database_url:
            url = self.database_url
            if url.startswith("postgresql://"):
                url = "postgresql+psycopg://" + url[len("postgresql://") :]
            return url
        self.ensure_data_dir()
        return f"sqlite:///{(self.data_dir / 'kimi-ops.db').resolve()}"

    @property
    def db_connections_max(self) -> int:
        """The most PostgreSQL connections one process opens: its pool plus the overflow (SQLite: no server)."""
        return self.db_pool_size + self.db_max_overflow

    def ensure_data_dir(self) -> Path:
        """Create ``data_dir`` if needed and prove it writable; else one-line :class:`ConfigError`."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.data_dir):
                pass
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ConfigError(
                f"KIMI_DATA_DIR: {self.data_dir} cannot be created or written ({reason}); "
                f"point it at a writable directory, e.g. {EXAMPLES['data_dir']}"
            ) from None
        return self.data_dir

    def endpoint(self, name: str) -> EndpointSettings | None:
        return next((e for e in self.endpoints if e.name == name), None)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _EnvSource(settings_cls), _YamlFileSource(settings_cls))


def _env_name(field_name: str) -> str:
    field = Settings.model_fields.get(field_name)
    alias = field.validation_alias if field is not None else None
    return alias.choices[0] if isinstance(alias, AliasChoices) else f"KIMI_{field_name.upper()}"  # type: ignore[return-value]


def _is_scalar_list(field: FieldInfo) -> bool:
    """``list[str]``, ``list[float]``…: a list whose items are plain values, not objects."""
    if typing.get_origin(field.annotation) is not list:
        return False
    (item,) = typing.get_args(field.annotation) or (Any,)
    if typing.get_origin(item) is Annotated:
        item = typing.get_args(item)[0]
    return item in (str, int, float)


class _EnvSource(EnvSettingsSource):
    """The environment, where a list may also be written comma-separated and bad JSON names its variable."""

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        if not isinstance(value, str):
            return super().decode_complex_value(field_name, field, value)
        scalar_list = _is_scalar_list(field)
        if scalar_list and not value.lstrip().startswith("["):
            # The natural way to write one region (us-east-1) or a few thresholds (24,6,1).
            return [part.strip() for part in value.split(",") if part.strip()]
        try:
            decoded = json.loads(value)
        except ValueError as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not JSON"
            form = "JSON or comma-separated values" if scalar_list else "JSON"
            raise ConfigError(
                f"{_env_name(field_name)}: not valid {form} ({reason}); e.g. {EXAMPLES.get(field_name, 'see the README')}"
            ) from None
        return decoded


class _YamlFileSource(PydanticBaseSettingsSource):
    """Reads the YAML file named by ``KIMI_CONFIG``; lower priority than the environment."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover - unused
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = os.environ.get("KIMI_CONFIG")
        if not path:
            return {}
        if not Path(path).exists():
            raise ConfigError(f"KIMI_CONFIG: file {path} does not exist; point KIMI_CONFIG at your YAML settings file") from None
        try:
            data = load_yaml_file(Path(path), max_bytes=CONFIG_MAX_BYTES) or {}
        except YamlFileError as exc:
            raise ConfigError(f"KIMI_CONFIG: {exc}; fix the file (e.g. deploy/kimi-ops.example.yaml)") from None
        if not isinstance(data, dict):
            raise ConfigError(f"KIMI_CONFIG: {path} must hold a mapping with keys such as endpoints: and roles:")
        return data


def _describe(error: Mapping[str, Any]) -> str:
    loc = [str(p) for p in error.get("loc", ())]
    top = loc[0] if loc else "settings"
    field = Settings.model_fields.get(top)
    env_name = None
    if field is not None and top not in {"endpoints", "services", "roles"}:
        env_name = _env_name(top)
    where = env_name or " ".join(["KIMI_CONFIG", *([".".join(loc)] if loc else [])])
    if env_name and len(loc) > 1:
        where += f" ({'item ' + str(int(loc[1]) + 1) if loc[1].isdigit() else '.'.join(loc[1:])})"
    msg = error.get("msg", "invalid value").removeprefix("Value error, ")
    example = EXAMPLES.get(top)
    return f"{where}: {msg}" + (f"; e.g. {example}" if example else "")


def load_settings(**overrides: Any) -> Settings:
    """Build :class:`Settings`, turning validation errors into one-line :class:`ConfigError`."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        errors = exc.errors()
        first = _describe(errors[0])
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise ConfigError(first + more) from None
