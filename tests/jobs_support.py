"""Helpers for the scheduled-job tests: scripted reservation and endpoint ports, and a live endpoint.

``ScriptedReservations`` stands in for the AWS adapter ONLY in watch and scheduler
tests (the adapter itself is tested against botocore's Stubber); it returns the
``ReservationInfo`` values a test puts in it, region by region.
``ScriptedEndpoint`` answers readiness completions with scripted results, so the
incident rules (N in a row, one recovery) are tested exactly.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field, replace

from bot.adapters.store.models import Deployment
from bot.config import EndpointSettings
from bot.domain.readiness import MetricsSnapshot, ReadinessResult
from bot.domain.reservations import ReservationInfo, same_instance_type
from bot.sandbox.stack import SANDBOX_DOOR, SANDBOX_EGRESS
from bot.services.context import Context
from bot.services.releases import register_release
from tests.conftest import START
from tests.workflow_support import release_data

UTC = dt.UTC


@dataclass
class ScriptedReservations:
    items: dict[str, ReservationInfo] = field(default_factory=dict)
    failing_regions: set[str] = field(default_factory=set)
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, info: ReservationInfo) -> ReservationInfo:
        self.items[info.id] = info
        return info

    def update(self, reservation_id: str, **changes: object) -> None:
        self.items[reservation_id] = replace(self.items[reservation_id], **changes)  # type: ignore[arg-type]

    def remove(self, reservation_id: str) -> None:
        del self.items[reservation_id]

    def _check(self, region: str) -> None:
        with self.lock:
            self.calls += 1
        if region in self.failing_regions:
            raise ConnectionError(f"Could not connect to the endpoint URL: https://ec2.{region}.amazonaws.com/")

    def capacity_blocks(self, region: str, instance_type: str) -> list[ReservationInfo]:
        self._check(region)
        return [i for i in self.items.values()
                if i.kind == "capacity-block" and i.region == region and same_instance_type(i.instance_type, instance_type)]

    def training_plans(self, region: str) -> list[ReservationInfo]:
        self._check(region)
        return [i for i in self.items.values() if i.kind == "training-plan" and i.region == region]


def capacity_block(cr_id: str, *, ends_in: dt.timedelta, zone: str = "us-east-1a", state: str = "active",
                   instance_type: str = "p6-b300.48xlarge", starts: dt.datetime | None = None) -> ReservationInfo:
    return ReservationInfo(
        id=cr_id, kind="capacity-block", region="us-east-1", instance_type=instance_type, availability_zone=zone,
        instance_count=1, start=starts or START - dt.timedelta(days=1), end=START + ends_in, state=state,
    )


def eks_endpoint(name: str, **overrides: object) -> dict:
    data: dict = {"name": name, "kind": "eks", "environment": "prod", "url": "http://127.0.0.1:9",
                  "availability_zone": "us-east-1a", "channel": f"C{name.upper().replace('-', '')}"}
    data.update(overrides)
    if data["kind"] == "hyperpod":  # a production HyperPod endpoint names its model pods' egress
        data.setdefault("egress", SANDBOX_EGRESS)
    if data.get("route") is None:  # ... and every production endpoint a door kimi-ops controls
        data.setdefault("door", SANDBOX_DOOR)
    return data


def make_live(ctx: Context, endpoint: str, release: str = "rel-live") -> int:
    """Record a deployment in state ``live`` on ``endpoint`` (what a finished deploy leaves behind)."""
    now = ctx.clock.now()
    with ctx.uow() as uow:
        exists = uow.releases.get(release) is not None
    if not exists:
        register_release(ctx, release_data(release), "U0DEPLOYER")
    with ctx.uow() as uow:
        ep = uow.endpoints.get(endpoint)
        rel = uow.releases.get(release)
        assert ep is not None and rel is not None
        dep = uow.deployments.add(Deployment(
            endpoint_id=ep.id, release_id=rel.id, kind="deploy", state="live", in_flight=None, requested_by="U0DEPLOYER",
            created_at=now, updated_at=now, finished_at=now,
        ))
        uow.commit()
        return dep.id


OK = ReadinessResult(ok=True, http_status=200, ttft_ms=180.0, total_ms=950.0, completion_tokens=8)
SLOW = ReadinessResult(ok=True, http_status=200, ttft_ms=4200.0, total_ms=6100.0, completion_tokens=8)
DOWN = ReadinessResult(ok=False, failure_kind="connection_refused", error="connection refused by 127.0.0.1:9")


@dataclass
class ScriptedEndpoint:
    """Answers readiness completions with what the test scripted, counting calls per endpoint."""

    answer: ReadinessResult = OK
    calls: dict[str, int] = field(default_factory=dict)

    def readiness(self, endpoint: EndpointSettings) -> ReadinessResult:
        self.calls[endpoint.name] = self.calls.get(endpoint.name, 0) + 1
        return self.answer

    def metrics(self, endpoint: EndpointSettings) -> MetricsSnapshot:
        return MetricsSnapshot(0, 0, 0.0, 0.0, None, None)

    def drain(self, endpoint: EndpointSettings, timeout_seconds: float,
              stop: object = None) -> tuple[bool, MetricsSnapshot | None]:
        return True, self.metrics(endpoint)
