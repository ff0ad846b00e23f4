"""Reserved GPU capacity from AWS: EC2 Capacity Blocks and SageMaker HyperPod training plans.

Implements :class:`bot.services.ports.ReservationSource` over boto3. Every list
call goes through boto3's paginators so accounts with many reservations are read
completely. Responses are normalised to :class:`ReservationInfo`: timestamps
become timezone-aware UTC, states become lower case (EC2 says ``active``,
SageMaker says ``Active``), and training plans are identified by their ARN.

moto implements neither API; the tests drive this adapter with botocore's
``Stubber``, which checks requests and responses against AWS's own models.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3

from bot.adapters.aws.session import make_client, new_session
from bot.domain.reservations import ReservationInfo

ClientFactory = Callable[[str, str], Any]
"""``(service, region) -> boto3 client``."""

CAPACITY_BLOCK = "capacity-block"
# A plan in one of these states needs no detail call: it will never hold capacity again.
# Training plans described at once per region (SageMaker's describe calls are rate-limited per account).
DESCRIBE_CONCURRENCY = 8
_FINISHED_PLAN_STATES = frozenset({"Expired", "Failed"})
# Before a Capacity Block starts its TotalInstanceCount is 0; the purchased count is in this tag.
_REQUESTED_QUANTITY_TAG = "aws:ec2capacityreservation:incrementalRequestedQuantity"
# Records from before ReservationType existed (and some API versions) carry the type only in this tag.
_RESERVATION_TYPE_TAG = "aws:ec2capacityreservation:capacityReservationType"


def default_client_factory(session: boto3.Session | None = None) -> ClientFactory:
    """boto3 clients built by :func:`bot.adapters.aws.session.make_client` from one session."""
    made: list[boto3.Session] = [session] if session is not None else []

    def factory(service: str, region: str) -> Any:
        if not made:  # the session (and its credential chain) only when AWS is first asked
            made.append(new_session())
        return make_client(service, region=region, session=made[0])

    return factory


class AwsReservationSource:
    """Reads Capacity Blocks (``ec2``) and training plans (``sagemaker``) region by region."""

    def __init__(self, client_factory: ClientFactory | None = None) -> None:
        self._factory = client_factory or default_client_factory()
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def client(self, service: str, region: str) -> Any:
        """The cached client for ``service`` in ``region`` (tests attach a Stubber to it)."""
        with self._lock:
            key = (service, region)
            if key not in self._clients:
                self._clients[key] = self._factory(service, region)
            return self._clients[key]

    def capacity_blocks(self, region: str, instance_type: str) -> list[ReservationInfo]:
        """Capacity Blocks for ``instance_type`` (EC2 name, no ``ml.`` prefix) in ``region``.

        The API filters by instance type server-side; it has no reservation-type
        filter, so ordinary On-Demand Capacity Reservations are dropped here by
        ``ReservationType`` (or, on a record without it, by its reservation-type tag).
        """
        ec2 = self.client("ec2", region)
        paginator = ec2.get_paginator("describe_capacity_reservations")
        pages = paginator.paginate(Filters=[{"Name": "instance-type", "Values": [instance_type.removeprefix("ml.")]}])
        found: list[ReservationInfo] = []
        for page in pages:
            for item in page.get("CapacityReservations", []):
                if _reservation_type(item) != CAPACITY_BLOCK:
                    continue
                found.append(_capacity_block(item, region))
        return found

    def training_plans(self, region: str) -> list[ReservationInfo]:
        """Every training plan in ``region``, with details from ``describe_training_plan`` while it can still run.

        The describe calls run ``DESCRIBE_CONCURRENCY`` at a time (boto3 clients are safe across threads): one
        at a time, a region with hundreds of plans took minutes; unbounded, it would meet SageMaker's throttling.
        """
        sagemaker = self.client("sagemaker", region)
        paginator = sagemaker.get_paginator("list_training_plans")

        def info(summary: Mapping[str, Any]) -> ReservationInfo:
            if summary.get("Status") in _FINISHED_PLAN_STATES:
                return _training_plan(summary, region)  # its summary says all: no detail call
            return _training_plan(sagemaker.describe_training_plan(TrainingPlanName=summary["TrainingPlanName"]), region)

        found: list[ReservationInfo] = []
        with ThreadPoolExecutor(max_workers=DESCRIBE_CONCURRENCY, thread_name_prefix="describe") as pool:
            for page in paginator.paginate():
                # Each page's plans are described before the next page is asked for; in listing order.
                found.extend(pool.map(info, page.get("TrainingPlanSummaries", [])))
        return found


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    if value is None:
        return None
    if value.tzinfo is None:  # botocore parses with tzutc; be safe with anything else
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def _tags(item: Mapping[str, Any]) -> dict[str, str]:
    return {t.get("Key", ""): t.get("Value", "") for t in item.get("Tags", []) or []}


def _reservation_type(item: Mapping[str, Any]) -> str | None:
    declared = item.get("ReservationType")
    return str(declared) if declared else _tags(item).get(_RESERVATION_TYPE_TAG) or None


def _capacity_block(item: Mapping[str, Any], region: str) -> ReservationInfo:
    count = int(item.get("TotalInstanceCount") or 0)
    if count == 0:
        requested = _tags(item).get(_REQUESTED_QUANTITY_TAG, "")
        count = int(requested) if requested.isdigit() else 0
    return ReservationInfo(
        id=item["CapacityReservationId"],
        kind="capacity-block",
        region=region,
        instance_type=item.get("InstanceType", ""),
        availability_zone=item.get("AvailabilityZone"),
        instance_count=count,
        start=_utc(item.get("StartDate")),
        end=_utc(item.get("EndDate")),
        state=str(item.get("State", "unknown")).lower(),
        platform=item.get("InstancePlatform"),
    )


def _one(values: Iterable[str | None]) -> str | None:
    """The single distinct value, or ``None`` when there are none or several."""
    distinct = {v for v in values if v}
    return distinct.pop() if len(distinct) == 1 else None


def _training_plan(plan: Mapping[str, Any], region: str) -> ReservationInfo:
    capacities = plan.get("ReservedCapacitySummaries", []) or []
    first_type = capacities[0].get("InstanceType", "") if capacities else ""
    instance_type = _one(c.get("InstanceType") for c in capacities) or first_type
    return ReservationInfo(
        id=plan["TrainingPlanArn"],
        kind="training-plan",
        region=region,
        instance_type=instance_type,
        availability_zone=_one(c.get("AvailabilityZone") for c in capacities),
        instance_count=int(plan.get("TotalInstanceCount") or sum(int(c.get("TotalInstanceCount") or 0) for c in capacities)),
        start=_utc(plan.get("StartTime")),
        end=_utc(plan.get("EndTime")),
        state=str(plan.get("Status", "unknown")).lower(),
        # A plan AWS describes without TargetResources says nothing it may carry: it fits nothing.
        target_resources=tuple(str(t) for t in plan.get("TargetResources") or ()),
    )
