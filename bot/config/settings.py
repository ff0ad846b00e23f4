"""The process's settings: every ``KIMI_*`` (and ``SLACK_*``) setting, checked as a whole.

Environment variables win over the ``KIMI_CONFIG`` file (:mod:`bot.config.sources`); the endpoints, services and
roles it declares are the models of :mod:`bot.config.endpoint`, :mod:`bot.config.service` and
:mod:`bot.config.roles`.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from bot.config.endpoint import EndpointSettings
from bot.config.examples import EXAMPLES
from bot.config.roles import Roles
from bot.config.service import ServiceSettings, with_pair_sides
from bot.config.sources import EnvSource, YamlFileSource
from bot.config_error import ConfigError
from bot.domain.egress import LABEL as LABEL_KEY
from bot.domain.egress import REQUIRED as REQUIRED_EGRESS
from bot.domain.evaluation import EvalSetError, parse_eval_set
from bot.domain.sweep import Objectives, SweepPlan
from bot.safe_yaml import YamlFileError, load_yaml_text, read_text_file

EVALUATION_SET_MAX_BYTES = 4 * 1024 * 1024
AWS_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d{1,2}$")
PositiveHours = Annotated[float, Field(gt=0, le=24 * 366)]


LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"  # a Kubernetes label value


class Settings(BaseSettings):
    """Every setting of kimi-ops; docs/configuration.md lists them, generated from these models."""

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
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", description="The least severe line logged.")
    aws_regions: list[str] = Field(
        default_factory=lambda: ["us-east-1"], min_length=1, description="Regions watched for reservations."
    )
    cli_user: str | None = Field(default=None, description="Slack user ID the CLI acts as when --as is not given.")
    slack_api_url: str | None = Field(default=None, description="Base URL of the Slack Web API (tests, sandbox).")
    oncall_group: str | None = Field(default=None, description="Slack user group mentioned on escalations.")
    # Pages from Prometheus for endpoints with slo.alerting: prometheus (docs/alerting.md).
    alertmanager_url: str | None = Field(
        default=None, pattern=r"^https?://", description="Alertmanager's base URL, where Silence buttons create silences.")
    alertmanager_webhook_token: str | None = Field(
        default=None, min_length=16, description="Bearer token Alertmanager's webhook must send to /alertmanager/webhook "
        "(from a Secret; unset: the path refuses every request).")
    prometheus_rule_labels: dict[Annotated[str, Field(pattern=LABEL_KEY)], Annotated[str, Field(pattern=LABEL_VALUE)]] = Field(
        default_factory=dict, description="Labels every rendered PrometheusRule carries, so Prometheus's ruleSelector "
        "picks it (kube-prometheus-stack: release: <its Helm release>).")
    alert_thresholds_hours: list[PositiveHours] = Field(
        default_factory=lambda: [168.0, 72.0, 24.0, 6.0, 1.0], min_length=1,
        description="Hours before a reservation ends at which to warn; each positive.",
    )
    readiness_failures_to_alert: int = Field(
        default=3, ge=1, description="Failed (or slow) readiness completions in a row before an alert.")
    reservation_watch_minutes: int = Field(default=15, ge=1, description="How often the reservation watch runs.")
    readiness_probe_minutes: int = Field(default=5, ge=1, description="How often each live endpoint gets a readiness completion.")
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
    slack_bot_token: str | None = Field(
        default=None, validation_alias=AliasChoices("SLACK_BOT_TOKEN"),
        description="Bot token (xoxb-…), needed by serve; with it the CLI also honours roles granted through user groups.")
    slack_signing_secret: str | None = Field(
        default=None, validation_alias=AliasChoices("SLACK_SIGNING_SECRET"),
        description="Verifies Slack's request signatures; needed by serve over HTTP.")
    slack_app_token: str | None = Field(default=None, validation_alias=AliasChoices("SLACK_APP_TOKEN"),
                                        description="App-level token (xapp-…) for serve --socket.")
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
    endpoints: list[EndpointSettings] = Field(default_factory=list,
                                              description="The serving targets (normally in the KIMI_CONFIG file).")
    capture_max_sampling_percent: int = Field(
        default=5, ge=1, le=100,
        description="Highest share of requests whose payloads an endpoint may capture (with a payload-capture exception).",
    )
    services: list[ServiceSettings] = Field(default_factory=list, description="Pairs of endpoints behind one route.")
    roles: Roles = Field(default_factory=Roles, description="Who may do what (normally in the KIMI_CONFIG file).")
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
    def _unique_prefix_run_on_prod(self) -> Settings:
        """The unique-prefix run is what keeps the knee from leaning on a friendly prefix cache: prod keeps it."""
        if "unique" not in self.traffic_sweep.prefix_modes:
            prod = [e.name for e in self.endpoints if e.environment == "prod"]
            if prod:
                raise ValueError(f"traffic_sweep.prefix_modes must include unique while a prod endpoint is declared "
                                 f"({', '.join(prod[:3])}): the traffic gate measures production with unique prompt "
                                 "prefixes too")
        return self

    @model_validator(mode="after")
    def _pairs(self) -> Settings:
        """Each side of a service gets the service's route (its Service first) and ramp, and knows its partner."""
        self.endpoints = with_pair_sides(self.endpoints, self.services)
        return self

    @model_validator(mode="after")
    def _prod_door(self) -> Settings:
        """A production endpoint has a door kimi-ops controls (after ``_pairs``: a pair side's route is the service's)."""
        for endpoint in self.endpoints:
            if endpoint.environment == "prod" and endpoint.route is None and endpoint.door.application_layer is None:
                raise ValueError(f"endpoint {endpoint.name} (prod) has no door kimi-ops controls: add a route: block "
                                 "(gateway, fallback), or declare door.application_layer (the layer that enforces "
                                 "admission and acknowledges each change); see deploy/kimi-ops.example.yaml")
            if endpoint.environment == "prod" and endpoint.route is not None and endpoint.route.cohort_header.source == "static":
                raise ValueError(f"endpoint {endpoint.name} (prod): its internal cohort is a header value any client can "
                                 "set; use cohort_header.source: token (a per-deployment token in a Secret) or jwt (a claim "
                                 "the gateway verifies)")
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
        return (init_settings, EnvSource(settings_cls), YamlFileSource(settings_cls))

