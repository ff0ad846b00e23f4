"""One serving target as an operator declares it: the endpoint, its admission limits, its ramp and its pair side."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bot.domain.capture import DataCapture
from bot.domain.doors import DoorSettings
from bot.domain.egress import REQUIRED as REQUIRED_EGRESS
from bot.domain.egress import EgressPolicy
from bot.domain.slo import SloSettings
from bot.route_config import Backend, RouteSettings

EndpointKind = Literal["hyperpod", "eks"]
IAM_ROLE_ARN = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]+$"


class RequestLimits(BaseModel):
    """Per-pod admission limits (HyperPod ``worker.requestLimits``)."""

    model_config = ConfigDict(extra="forbid")

    max_concurrent_requests: int = Field(default=8, ge=1, le=10_000,
                                         description="Requests the model serves at once (EKS: vLLM's --max-num-seqs).")
    max_queue_size: int = Field(default=16, ge=0, le=100_000, description="Requests that may wait beyond those.")
    overflow_status_code: Literal[429, 503] = Field(default=429, description="The answer to a request beyond both.")


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
    kv_cache_usage: float = Field(default=0.95, gt=0, le=1, description="KV-cache usage (0-1) a step may see.")
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

    service: str = Field(description="The service this endpoint is a side of.")
    partner: str = Field(description="The service's other side.")
    fallback: Backend | None = Field(
        default=None, description="The service's smaller fallback model, where users go while the side they are on "
                                  "fails (never the other side, which may hold an older release or none checked).")


class EndpointSettings(BaseModel):
    """One serving target, as an operator declares it in the ``KIMI_CONFIG`` file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
                      description="What people call the endpoint; also the name of the objects rendered for it.")
    kind: EndpointKind = Field(default="hyperpod",
                               description="`hyperpod` (the HyperPod Inference Operator) or `eks` (a Deployment).")
    environment: str = Field(default="prod", description="`prod` refuses self-approval and requires `egress` on HyperPod.")
    namespace: str = Field(default="model-serving", description="Kubernetes namespace of the endpoint's objects.")
    cluster_context: str | None = Field(default=None, description="kubeconfig context of its cluster (default: the current one).")
    url: str = Field(default="http://127.0.0.1:8000", description="Base URL of its OpenAI-compatible API.")
    served_model_name: str = Field(default="Kimi-K3", description="The model name the server must list and answer under.")
    channel: str | None = Field(default=None, description="Slack channel ID of its threads and alerts; invite the bot there.")
    region: str = Field(default="us-east-1", description="AWS region of its reservation.")
    instance_type: str = Field(default="p6-b300.48xlarge", description="The node's instance type.")
    availability_zone: str | None = Field(default=None, description="Zone the node and its reservation must be in.")
    reservation_id: str | None = Field(default=None, description="Its Capacity Block ID or training plan ARN "
                                       "(default: one of its region, kind, instance type and zone).")
    request_limits: RequestLimits = Field(default_factory=RequestLimits, description="Admission limits as declared.")
    # Written by an approver accepting the traffic gate's proposal; kept across restarts by sync_endpoints.
    accepted_request_limits: RequestLimits | None = Field(
        default=None, description="Limits accepted at a traffic gate; they win over request_limits (never set by hand).")
    warmup_minutes: int = Field(default=45, ge=0, description="Warm-up the reservation must leave room for.")
    soak_minutes: int = Field(default=120, ge=0, description="Soak the reservation must leave room for.")
    rollout_window_minutes: int = Field(default=240, ge=0, description="Rollout the reservation must leave room for.")
    max_deploy_seconds: int = Field(default=3600, ge=60, description="How long a rollout may take before it fails.")
    ttft_objective_ms: int = Field(default=2000, ge=1,
                                   description="First-token objective of readiness probes and the traffic gate's knee.")
    separate_approver: bool | None = Field(
        default=None, description="Whether a requester may not approve their own gates (default: true on `prod`).")
    rollback_approvals: int = Field(default=1, ge=0, le=4,
                                    description="Approvals a rollback's artifact gate needs (0: none when no check fails).")
    # The Gateway API HTTPRoute kimi-ops keeps in front of the endpoint (bot/route_config.py); None: no route.
    route: RouteSettings | None = Field(default=None, description="The HTTPRoute in front of the endpoint (none: the "
                                        "admission ConfigMap only).")
    # Who besides the route's Gateway may reach the model pods, and any declared side door (bot/domain/doors.py).
    door: DoorSettings = Field(default_factory=DoorSettings, description="Who besides the route's Gateway may reach "
                               "the model pods (ingress NetworkPolicy), and any declared SageMaker endpoint or ALB.")
    route_accept_seconds: float = Field(default=60, gt=0, le=3600,
                                        description="How long the gateway may take to accept a route change.")
    drain_seconds: float = Field(default=600, gt=0, le=86_400,
                                 description="How long closed admission waits for requests to finish.")
    ramp: RampSettings = Field(default_factory=RampSettings, description="How users meet a candidate after its gates.")
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
    slo: SloSettings = Field(default_factory=SloSettings, description="Objectives and error budgets after go-live.")
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
        if isinstance(data, dict) and "client_namespaces" in data:
            # Rows stored before hold the old default; anything else let a namespace past the route.
            data = dict(data)
            if data.pop("client_namespaces") not in (["kimi-ops"], []):
                raise ValueError("client_namespaces was replaced by door: (kimi_ops, metrics_scraper, application_layer); "
                                 "users reach the model through the route's Gateway only")
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

    @property
    def smaller_fallback(self) -> bool:
        """Whether the route's fallback is a smaller model, not Kimi K3 on a pair's other side: a single node's
        fallback, or a pair side's route while it sends users to the service's fallback (:meth:`on_fallback`)."""
        route = self.route
        if route is None or route.fallback is None:
            return False
        return self.pair is None or (self.pair.fallback is not None and route.fallback.same(self.pair.fallback))

    def on_fallback(self) -> EndpointSettings:
        """The endpoint as a failover writes its route: a pair side with the service's smaller fallback in its
        partner's place, so closing sends users to that model and never to the other side; others unchanged."""
        if self.pair is None or self.pair.fallback is None or self.route is None:
            return self
        return self.model_copy(update={"route": self.route.model_copy(update={"fallback": self.pair.fallback})})
