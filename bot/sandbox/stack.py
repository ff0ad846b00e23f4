"""The whole sandbox: every stand-in running, and a Context whose real adapters talk to them.

:class:`Sandbox` starts moto (S3 weights, ECR image), kmock's Kubernetes emulator
seeded like a HyperPod cluster with the operator simulator, the capacity stand-in
(a training plan covering the endpoint), and the OpenAI-compatible server made
to answer the default evaluation set and to saturate past a concurrency limit.
It writes nothing outside its data directory: a fresh SQLite database there,
migrated, with the example releases of ``deploy/releases`` registered after
their weights and images are seeded in moto.

The adapters are the production classes (:func:`bot.bootstrap.production_adapters`
builds the same ones from settings), pointed at the stand-ins. ``kimi-ops
sandbox`` and ``kimi-ops demo`` put the Slack bot on top of it; tests use it for
whole-workflow runs. :meth:`Sandbox.environment` gives the variables that aim a
separate ``kimi-ops`` process at the same stand-ins. By default it also runs the
traffic layer (:mod:`bot.sandbox.traffic`: a fallback model server and the Gateway
API gateway stand-in), gives the endpoint its ``route`` block and a ramp of a few
seconds per step, and :attr:`Sandbox.gateway_url` is where users' requests go;
``users_per_second`` starts background users there (:mod:`bot.sandbox.users`).
``traffic=False`` gives the endpoint without a route: an application layer stand-in
(:mod:`bot.sandbox.app_layer`) holds the door and acknowledges each admission change.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from bot.adapters.clock import Clock, SystemClock
from bot.config import EndpointSettings, Settings, load_settings
from bot.domain.release import ReleaseManifest
from bot.sandbox.aws import INFERENCE_ROLE

if TYPE_CHECKING:
    from bot.sandbox.users import UserTraffic
    from bot.services.context import Ports

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_RELEASES = REPO / "deploy" / "releases"
NAMESPACE = "model-serving"
ZONE = "us-east-1a"
ENDPOINT = "kimi-prod"
# pair=True: a service of two endpoints (each its own model server and reservation) behind one route.
SERVICE = "kimi"
BLUE, GREEN = "kimi-blue", "kimi-green"
CHANNEL = "C0KIMIPROD"
KUBE_CONTEXT = "kimi-sandbox"
DEPLOYER, APPROVER_1, APPROVER_2, ADMIN = "U0DEPLOYER", "U0APPROVER1", "U0APPROVER2", "U0ADMIN"
# The deployer is an approver too, as on most platform teams: separation of duties still stops them
# approving their own deployment on a prod endpoint.
ROLES = {"viewer": [], "deployer": [DEPLOYER], "approver": [DEPLOYER, APPROVER_1, "S0APPROVERS"], "admin": [ADMIN]}
GROUPS = {"S0APPROVERS": [APPROVER_2]}

# The endpoint stand-in saturates like a small vLLM: six requests run, two wait, the rest get 429.
SERVER_LIMIT: dict[str, Any] = {"max_running": 6, "max_waiting": 2, "overflow_status": 429}
# It costs like a node: a 250k-token prompt prefills in half a second, and its KV cache holds 400k tokens (one
# max_model_len request and change), so a long-context-heavy production mix finds a lower knee than the fixed prompt.
SERVER_SPEED: dict[str, Any] = {"first_token_delay": 0.08, "token_delay": 0.004, "prefill_per_token": 0.000002,
                                "kv_capacity_tokens": 400_000}
# A sweep that finds that knee in seconds rather than the production default's minutes. The fixed prompt's sweep
# takes about 20 s; one replaying the demo's long-context mix (answers of a few hundred tokens) about 45 s on a busy
# machine: at 20 s the budget ended it before its unique-prefix run, and on a slower machine before its knee.
SANDBOX_SWEEP = {
    "ceiling": 16, "warmup_requests": 1, "steady_requests_per_slot": 1, "steady_seconds": 3, "burst_rounds": 1,
    "refine_steps": 1, "max_requests": 300, "max_seconds": 45, "request_timeout_seconds": 10,
    "max_tokens": 8, "prompt_words": 48, "prefix_modes": ["shared", "unique"],
}
RESERVATION_DAYS = 5.0  # inside the 7-day threshold: the first reservation watch posts an alert
# The stand-in answers in ~0.1-0.4 s on whatever CPU runs it, so a busy laptop moves its latency by more
# than the default tolerance; the sandbox's copy of the evaluation set ignores rises below a second.
SANDBOX_LATENCY_FLOOR_MS = 1000.0


# Behind the gateway, the procedure's waits sized for a demo: a few seconds per ramp step, not minutes.
SANDBOX_RAMP: dict[str, Any] = {"steps": [10, 50], "soak_seconds": 1.5, "sample_seconds": 0.5}
SANDBOX_ROUTE_TIMINGS: dict[str, Any] = {"route_accept_seconds": 15, "drain_seconds": 30}
SANDBOX_PAIR_RAMP: dict[str, Any] = {"steps": [5, 25, 50], "soak_seconds": 1.5, "sample_seconds": 0.5}
USERS_PER_SECOND = 4.0  # the demo's and console's background users (0 in tests unless they ask)


SANDBOX_EGRESS: dict[str, Any] = {
    "weights_cidrs": ["10.0.64.0/24"],
    "telemetry": {"namespace": "hyperpod-observability", "pod_labels": {"app.kubernetes.io/name": "otel-collector"}},
    "control_plane_cidrs": ["10.0.0.0/26"],
}
"""Where the sandbox's production HyperPod model pods may connect (a production HyperPod endpoint must name it)."""


SANDBOX_APPLICATION_LAYER: dict[str, Any] = {
    "namespace": NAMESPACE, "pod_labels": {"app.kubernetes.io/name": "kimi-app-layer"}, "acknowledge_seconds": 15}
"""``traffic=False``: the application layer that holds the door instead of a route (bot/sandbox/app_layer.py)."""
SANDBOX_DOOR: dict[str, Any] = {"application_layer": SANDBOX_APPLICATION_LAYER}
"""The ``door`` of a production endpoint without a route (a prod endpoint must have one or the other)."""


def endpoint_config(url: str, route: dict[str, Any] | None = None) -> dict[str, Any]:
    """The sandbox's one production endpoint on HyperPod (behind the gateway stand-in when ``route`` is given)."""
    behind_gateway = {"route": route, "ramp": SANDBOX_RAMP, **SANDBOX_ROUTE_TIMINGS} if route else {}
    return {**behind_gateway, "approver_group": "S0APPROVERS",
        "name": ENDPOINT, "kind": "hyperpod", "environment": "prod", "namespace": NAMESPACE,
        "cluster_context": KUBE_CONTEXT, "url": url, "channel": CHANNEL, "availability_zone": ZONE,
        "reservation_id": f"arn:aws:sagemaker:us-east-1:123456789012:training-plan/{ENDPOINT}",
        "request_limits": {"max_concurrent_requests": 32, "max_queue_size": 64},
        "inference_roles": [INFERENCE_ROLE], "egress": SANDBOX_EGRESS,
    }


def pair_configs(urls: Mapping[str, str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The two sides of the sandbox's service (endpoints without a route of their own) and the service itself."""
    from bot.sandbox.traffic import GATEWAY_NAME, GATEWAY_NAMESPACE

    sides = []
    for name in (BLUE, GREEN):
        side = {**endpoint_config(urls[name]), **SANDBOX_ROUTE_TIMINGS, "name": name,
                "reservation_id": f"arn:aws:sagemaker:us-east-1:123456789012:training-plan/{name}"}
        sides.append(side)
    service = {"name": SERVICE, "sides": [BLUE, GREEN], "ramp": SANDBOX_PAIR_RAMP,
               "route": {"gateway": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE}}}
    return sides, service


def example_releases() -> list[ReleaseManifest]:
    """The releases under ``deploy/releases``, oldest first."""
    return [ReleaseManifest.model_validate(yaml.safe_load(p.read_text(encoding="utf-8")))
            for p in sorted(EXAMPLE_RELEASES.glob("*.yaml"))]


@dataclass
class Sandbox:
    """Start with ``Sandbox(data_dir).start()`` (or ``with``); :meth:`stop` stops every stand-in."""

    data_dir: Path
    clock: Clock = field(default_factory=SystemClock)
    reservation_days: float = RESERVATION_DAYS
    settings_overrides: Mapping[str, Any] = field(default_factory=dict)
    traffic: bool = True  # the fallback model server and the gateway stand-in (False: the legacy admission ConfigMap)
    users_per_second: float = 0.0  # background user requests through the gateway (needs ``traffic``)
    pair: bool = False  # the service of two endpoints (BLUE, GREEN), a model server each, instead of ENDPOINT
    endpoint_overrides: Mapping[str, Any] = field(default_factory=dict)  # e.g. a shorter drain_seconds for a test
    service_overrides: Mapping[str, Any] = field(default_factory=dict)  # the pair's service, e.g. its ramp
    # Availability drills: the operator simulator also plays the controller (deleted pods come back after
    # pod_restart_seconds on ``clock``) and the model server follows the pods (503 while none is ready).
    drills: bool = False
    pod_restart_seconds: float = 120.0
    # How often the traffic gate's sweep reads /metrics for its peaks (the adapter's own 20 a second by default; the
    # demo's long-context knee is a KV-cache peak). A test world whose sweeps' knees are the 429s may read less often.
    sweep_metrics_seconds: float = 0.05
    stand_ins: dict[str, Any] = field(default_factory=dict)
    _served_model: str = "Kimi-K3"  # what the model server serves by default (the pods' args may rename it)
    releases: list[ReleaseManifest] = field(default_factory=list)
    ctx: Any = None
    # The cohort's token as last read, and the emulator's word that a write came since (see :meth:`cohort`).
    _cohort_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _cohort_seen: threading.Event | None = field(default=None, repr=False)
    _cohort_rest: Any = field(default=None, repr=False)
    _cohort: tuple[str, str] | None = field(default=None, repr=False)

    def start(self) -> Sandbox:
        from bot.adapters.store import schema
        from bot.bootstrap import build_context

        try:
            self._start_stand_ins()
            settings = self.settings()
            if settings.database_url and settings.database_url.startswith("sqlite"):
                schema.new_sqlite_at_head(Path(settings.database_url.removeprefix("sqlite:///")))
            else:
                schema.upgrade(settings.effective_database_url)
            self.ctx = build_context(settings, clock=self.clock, ports=self.ports())
            self.releases = self._seed(settings)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_stand_ins(self) -> None:
        from bot.sandbox.aws import start_moto
        from bot.sandbox.capacity import CapacityStandIn
        from bot.sandbox.capacity_http import SageMakerFace
        from bot.sandbox.eval_replies import (
            DEFAULT_SET_REFUSAL_PATTERNS,
            DEFAULT_SET_REPLIES,
        )
        from bot.sandbox.kube import seed_cluster, start_kube
        from bot.sandbox.openai_server import OpenAIServer
        from bot.sandbox.operator import OperatorSimulator

        self.data_dir.mkdir(parents=True, exist_ok=True)
        moto = self.stand_ins["moto"] = start_moto()
        moto.reset()
        kube = self.stand_ins["kube"] = start_kube()
        seed_cluster(kube.rest(), namespace=NAMESPACE, zone=ZONE)
        self.stand_ins["openai"] = OpenAIServer(
            replies=DEFAULT_SET_REPLIES, refusal_patterns=DEFAULT_SET_REFUSAL_PATTERNS, **SERVER_SPEED, **SERVER_LIMIT,
        ).start()
        self._served_model = self.stand_ins["openai"].behaviour.served_model
        self.stand_ins["operator"] = OperatorSimulator(
            kube.rest(), NAMESPACE, controller=self.drills, restart_seconds=self.pod_restart_seconds, clock=self.clock,
            serving=self._follow_pods if self.drills else None, changed=kube.changes(),
        ).__enter__()
        if self.traffic:
            from bot.sandbox.traffic import start_traffic_layer

            self.stand_ins["traffic"] = start_traffic_layer(kube.rest(), namespace=NAMESPACE, endpoint=ENDPOINT,
                                                            model_url=self.stand_ins["openai"].url,
                                                            changed=kube.changes())
            if self.pair:
                from bot.route_config import MODEL_PORT
                from bot.sandbox.gateway import ServiceKey

                # The second side's own model server: the gateway splits the service's route between the two.
                self.stand_ins["openai_green"] = OpenAIServer(
                    replies=DEFAULT_SET_REPLIES, refusal_patterns=DEFAULT_SET_REFUSAL_PATTERNS, **SERVER_SPEED,
                    **SERVER_LIMIT).start()
                for name in (BLUE, GREEN):
                    self.stand_ins["traffic"].gateway.add_backend(ServiceKey(NAMESPACE, name, MODEL_PORT),
                                                                  self.side_server(name).url)
            if self.users_per_second > 0:
                from bot.sandbox.users import UserTraffic

                # The internal users read the cohort's token from its Secret, as an application layer does.
                self.stand_ins["users"] = UserTraffic(
                    self.stand_ins["traffic"].url, cohort=self.cohort, per_second=self.users_per_second).start()
        else:
            from bot.sandbox.app_layer import ApplicationLayerStandIn

            # Without a route the door is an application layer that enforces admission and acknowledges it.
            self.stand_ins["app_layer"] = ApplicationLayerStandIn(kube.rest(), NAMESPACE, ENDPOINT,
                                                                  changed=kube.changes()).start()
        capacity = self.stand_ins["capacity"] = CapacityStandIn()
        self.stand_ins["sagemaker"] = SageMakerFace(capacity).start()  # for kimi-ops processes of environment()

    def _follow_pods(self, obj: dict[str, Any], ready: bool) -> None:
        """The model server answers as the endpoint's pods allow: 503 with none ready, else as the args say (on a
        pair, the server of the side the object is)."""
        from bot.adapters.cluster.drills import vllm_args

        server = self.side_server(str(obj["metadata"]["name"]))
        if not ready:
            server.configure(health_status=503, fail_status=503, fail_message="no ready pod behind the endpoint")
            return
        args = [str(a) for a in vllm_args(obj) or []]
        named = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--served-model-name"]
        server.configure(health_status=200, fail_status=None, served_model=named[-1] if named else self._served_model)

    def settings(self) -> Settings:
        """The sandbox's settings: its own SQLite file, the endpoint on the stand-ins, the demo's people."""
        values: dict[str, Any] = {
            "data_dir": self.data_dir,
            "database_url": f"sqlite:///{(self.data_dir / 'sandbox.db').resolve()}",
            "config": None,
            **self._endpoints_config(),
            "roles": ROLES,
            "aws_regions": ["us-east-1"],
            "traffic_sweep": SANDBOX_SWEEP,
            "oncall_group": "S0ONCALL",
            "evaluation_set": self._evaluation_set(),
            **self.settings_overrides,
        }
        return load_settings(**values)

    def _evaluation_set(self) -> Path:
        """The default evaluation set, with a latency tolerance fit for a stand-in on a shared CPU."""
        from bot.services.model_gate import DEFAULT_EVAL_SET

        data = yaml.safe_load(DEFAULT_EVAL_SET.read_text(encoding="utf-8"))
        data.setdefault("tolerances", {})["latency_floor_ms"] = SANDBOX_LATENCY_FLOOR_MS
        path = self.data_dir / "sandbox-evaluation.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    def ports(self) -> Ports:
        """The production adapter classes, aimed at the stand-ins."""
        from bot.adapters.aws.artifacts import RegionalArtifactVerifier
        from bot.adapters.aws.reservations import AwsReservationSource
        from bot.adapters.cluster import ContextClusters
        from bot.adapters.endpoint import HttpEndpointClient
        from bot.adapters.endpoint.evaluation import HttpEvaluator
        from bot.adapters.endpoint.loadgen import HttpLoadGenerator
        from bot.services.context import Ports

        moto, kube = self.stand_ins["moto"], self.stand_ins["kube"]
        endpoint = HttpEndpointClient(timeout=30, drain_poll_seconds=0.2)
        return Ports(
            artifacts=RegionalArtifactVerifier("us-east-1", client_factory=lambda service, region: moto.client(service, region)),
            cluster=ContextClusters(client_factory=lambda _context: kube.api_client(), poll_seconds=0.1, clock=self.clock),
            reservations=AwsReservationSource(self.stand_ins["capacity"].client_factory()),
            endpoint=endpoint,
            evaluator=HttpEvaluator(),
            loadgen=HttpLoadGenerator(metrics=endpoint.peak_metrics, metrics_interval=self.sweep_metrics_seconds),
            silences=self._silences(),
        )

    def _silences(self) -> Any:
        """Alertmanager's API where ``--prometheus`` runs one (``alertmanager_url`` among the settings overrides)."""
        from bot.adapters.alertmanager import HttpAlertmanager

        url = self.settings_overrides.get("alertmanager_url")
        return HttpAlertmanager(str(url)) if url else None

    def _seed(self, settings: Settings) -> list[ReleaseManifest]:
        """Weights and images in moto, the reservation in the capacity stand-in, the releases registered."""
        from bot.sandbox.aws import seed_good_release
        from bot.sandbox.governance import seed_governance
        from bot.services.releases import register_release

        moto = self.stand_ins["moto"]
        s3, ecr = moto.client("s3"), moto.client("ecr")
        now = self.clock.now()
        for config in self._endpoints_config()["endpoints"]:  # each side of a pair has its own reservation
            self.stand_ins["capacity"].cover(EndpointSettings(**config), now - dt.timedelta(days=1),
                                             now + dt.timedelta(days=self.reservation_days))
        seeded = [seed_good_release(s3, ecr, release, tag=release.name) for release in example_releases()]
        for release in seeded:
            register_release(self.ctx, release.model_dump(mode="json"), "sandbox")
        seed_governance(self.ctx, seeded, [EndpointSettings(**c) for c in self._endpoints_config()["endpoints"]])
        return seeded

    def side_server(self, name: str) -> Any:
        """The model server behind one side of the pair (BLUE is the sandbox's first server)."""
        return self.stand_ins["openai_green" if name == GREEN else "openai"]

    def _endpoints_config(self) -> dict[str, Any]:
        if not self.pair:
            return {"endpoints": [self._endpoint_config()]}
        sides, service = pair_configs({name: self.side_server(name).url for name in (BLUE, GREEN)})
        return {"endpoints": [{**side, **self.endpoint_overrides} for side in sides],
                "services": [{**service, **self.service_overrides}]}

    def _endpoint_config(self) -> dict[str, Any]:
        config = endpoint_config(self.stand_ins["openai"].url, self._route())
        if config.get("route") is None:
            config["door"] = SANDBOX_DOOR
        return {**config, **self.endpoint_overrides}

    def _route(self) -> dict[str, Any] | None:
        if "traffic" not in self.stand_ins:
            return None
        from bot.sandbox.traffic import route_config

        return route_config()

    def cohort(self) -> tuple[str, str] | None:
        """The internal cohort's header and current token, read from its Secret (``None`` before the first closing).

        Read again only once the emulator answered a write since the last read (it says so before the writer hears
        back): the Secret changes by nothing else, and an application layer watches it rather than reading it for each
        request (the background users' cohort asks several times a second).
        """
        from bot.sandbox.traffic import cohort_secret_name, read_cohort

        with self._cohort_lock:
            if self._cohort_seen is None:
                kube = self.stand_ins["kube"]
                self._cohort_seen, self._cohort_rest = kube.changes(), kube.rest()
                self._cohort_seen.set()
            if self._cohort_seen.is_set():
                self._cohort_seen.clear()
                self._cohort = read_cohort(self._cohort_rest, NAMESPACE,
                                           cohort_secret_name(SERVICE if self.pair else ENDPOINT))
            return self._cohort

    @property
    def gateway_url(self) -> str | None:
        """Where users' requests go when the traffic layer runs (the gateway stand-in's listener)."""
        traffic = self.stand_ins.get("traffic")
        return None if traffic is None else str(traffic.url)

    @property
    def users(self) -> UserTraffic | None:
        """The background user traffic, when it runs."""
        users: UserTraffic | None = self.stand_ins.get("users")
        return users

    @property
    def endpoint(self) -> EndpointSettings:
        endpoint: EndpointSettings = self.ctx.settings.endpoint(ENDPOINT)
        return endpoint

    def environment(self, kubeconfig: Path) -> dict[str, str]:
        """Variables that aim a separate ``kimi-ops`` process at this sandbox (database, S3/ECR, training plans, cluster)."""
        config = self.data_dir / "sandbox-settings.yaml"
        settings = self.settings()
        config.write_text(
            yaml.safe_dump(
                json.loads(
                    settings.model_dump_json(include={"endpoints", "services", "roles", "traffic_sweep", "evaluation_set",
                                                    "oncall_group"})
                )
            )
        )
        self.write_kubeconfig(kubeconfig)
        return {
            "KIMI_DATABASE_URL": settings.database_url or "",
            "KIMI_DATA_DIR": str(self.data_dir),
            "KIMI_CONFIG": str(config),
            "KUBECONFIG": str(kubeconfig),
            "KIMI_ROLLOUT_POLL_SECONDS": "0.2",  # the operator simulator moves in tenths of a second
            "AWS_ENDPOINT_URL": self.stand_ins["moto"].url,
            "AWS_ENDPOINT_URL_SAGEMAKER": self.stand_ins["sagemaker"].url,  # training plans: moto has none
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig whose ``kimi-sandbox`` context is the Kubernetes emulator."""
        kube = self.stand_ins["kube"]
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": KUBE_CONTEXT,
                    "clusters": [{"name": KUBE_CONTEXT, "cluster": {"server": kube.url}}],
                    "users": [{"name": "sandbox", "user": {"token": "sandbox"}}],
                    "contexts": [{"name": KUBE_CONTEXT, "context": {"cluster": KUBE_CONTEXT, "user": "sandbox"}}],
                }
            )
        )
        os.chmod(path, 0o600)
        return path

    def stop(self) -> None:
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None
        for name in ("users", "sagemaker", "app_layer", "traffic", "openai_green", "openai", "operator", "kube", "moto"):
            stand_in = self.stand_ins.pop(name, None)
            if stand_in is not None:
                stand_in.stop()
        self._cohort_seen = self._cohort_rest = self._cohort = None

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
