"""The AWS reservations adapter against botocore's Stubber (moto implements neither API).

Responses follow the real shapes in reference/protocol-samples/aws/ (a Capacity
Block from ``describe_capacity_reservations``, a HyperPod training plan); the
Stubber rejects any request or response that does not fit AWS's own models.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from bot.adapters.aws.reservations import AwsReservationSource

UTC = dt.UTC
REGION = "us-east-2"
P6 = "p6-b300.48xlarge"


def _session() -> boto3.Session:
    return boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)


@pytest.fixture()
def source() -> AwsReservationSource:
    session = _session()
    return AwsReservationSource(lambda service, region: session.client(service, region_name=region))


@pytest.fixture()
def ec2(source: AwsReservationSource) -> Iterator[Stubber]:
    with Stubber(source.client("ec2", REGION)) as stub:
        yield stub
        stub.assert_no_pending_responses()


@pytest.fixture()
def sagemaker(source: AwsReservationSource) -> Iterator[Stubber]:
    with Stubber(source.client("sagemaker", REGION)) as stub:
        yield stub
        stub.assert_no_pending_responses()


def capacity_block(cr_id: str, *, state: str = "active", total: int = 1, tags: list[dict[str, str]] | None = None,
                   reservation_type: str = "capacity-block", instance_type: str = P6) -> dict[str, Any]:
    """One ``CapacityReservation`` as EC2 returns it for a Capacity Block (shape of the ParallelCluster sample)."""
    return {
        "CapacityReservationId": cr_id,
        "OwnerId": "447714826191",
        "CapacityReservationArn": f"arn:aws:ec2:{REGION}:447714826191:capacity-reservation/{cr_id}",
        "AvailabilityZoneId": "use2-az1",
        "InstanceType": instance_type,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-east-2a",
        "Tenancy": "default",
        "TotalInstanceCount": total,
        "AvailableInstanceCount": total,
        "EbsOptimized": True,
        "EphemeralStorage": False,
        "State": state,
        "StartDate": dt.datetime(2026, 11, 20, 11, 30, tzinfo=UTC),
        "EndDate": dt.datetime(2026, 12, 4, 11, 30, tzinfo=UTC),
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": dt.datetime(2026, 11, 6, 12, 3, 21, tzinfo=UTC),
        "Tags": tags if tags is not None else [
            {"Key": "aws:ec2capacityreservation:capacityReservationType", "Value": "capacity-block"},
        ],
        "CapacityAllocations": [],
        "ReservationType": reservation_type,
    }


def test_capacity_blocks_follow_next_token_and_keep_only_capacity_blocks(source: AwsReservationSource, ec2: Stubber) -> None:
    request = {"Filters": [{"Name": "instance-type", "Values": [P6]}]}
    ec2.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [capacity_block("cr-0aaa"), capacity_block("cr-0odcr", reservation_type="default")],
         "NextToken": "page-2"},
        request,
    )
    ec2.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [capacity_block(
            "cr-0bbb", state="scheduled", total=0,
            tags=[{"Key": "aws:ec2capacityreservation:incrementalRequestedQuantity", "Value": "2"}],
        )]},
        {**request, "NextToken": "page-2"},
    )

    found = source.capacity_blocks(REGION, f"ml.{P6}")

    assert [r.id for r in found] == ["cr-0aaa", "cr-0bbb"]  # the ordinary ODCR is not a Capacity Block
    first, second = found
    assert first.kind == "capacity-block" and first.region == REGION and first.instance_type == P6
    assert first.availability_zone == "us-east-2a" and first.state == "active" and first.instance_count == 1
    assert first.start == dt.datetime(2026, 11, 20, 11, 30, tzinfo=dt.UTC)
    assert first.end == dt.datetime(2026, 12, 4, 11, 30, tzinfo=dt.UTC) and first.end.tzinfo is dt.UTC
    # Before it starts a Capacity Block reports 0 instances; the purchased count is in its tag.
    assert second.state == "scheduled" and second.instance_count == 2


def test_training_plans_are_listed_page_by_page_and_described(source: AwsReservationSource, sagemaker: Stubber) -> None:
    arn = f"arn:aws:sagemaker:{REGION}:447714826191:training-plan/kimi-k3-prod"
    old_arn = f"arn:aws:sagemaker:{REGION}:447714826191:training-plan/kimi-k3-old"
    capacity = {
        "ReservedCapacityArn": f"arn:aws:sagemaker:{REGION}:447714826191:reserved-capacity/rc-1",
        "ReservedCapacityType": "Instance",
        "InstanceType": "ml.p6-b300.48xlarge",
        "TotalInstanceCount": 1,
        "Status": "Active",
        "AvailabilityZone": "us-east-2b",
        "AvailabilityZoneId": "use2-az2",
        "DurationHours": 336,
        "DurationMinutes": 0,
        "StartTime": dt.datetime(2026, 11, 25, 0, 0, tzinfo=UTC),
        "EndTime": dt.datetime(2026, 12, 9, 0, 0, tzinfo=UTC),
    }
    summary = {
        "TrainingPlanArn": arn,
        "TrainingPlanName": "kimi-k3-prod",
        "Status": "Active",
        "DurationHours": 336,
        "DurationMinutes": 0,
        "StartTime": dt.datetime(2026, 11, 25, 0, 0, tzinfo=UTC),
        "EndTime": dt.datetime(2026, 12, 9, 0, 0, tzinfo=UTC),
        "UpfrontFee": "123456.00",
        "CurrencyCode": "USD",
        "TotalInstanceCount": 1,
        "AvailableInstanceCount": 0,
        "InUseInstanceCount": 1,
        "TargetResources": ["hyperpod-cluster"],
        "ReservedCapacitySummaries": [capacity],
    }
    expired = {**summary, "TrainingPlanArn": old_arn, "TrainingPlanName": "kimi-k3-old", "Status": "Expired",
               "StartTime": dt.datetime(2026, 1, 1, tzinfo=UTC), "EndTime": dt.datetime(2026, 1, 15, tzinfo=UTC),
               "ReservedCapacitySummaries": [{**capacity, "Status": "Expired"}]}
    sagemaker.add_response("list_training_plans", {"TrainingPlanSummaries": [summary], "NextToken": "t2"}, {})
    sagemaker.add_response(
        "describe_training_plan",
        {**{k: v for k, v in summary.items() if k != "TrainingPlanName"}, "TrainingPlanName": "kimi-k3-prod",
         "StatusMessage": "capacity delivered", "UnhealthyInstanceCount": 0, "AvailableSpareInstanceCount": 0},
        {"TrainingPlanName": "kimi-k3-prod"},
    )
    sagemaker.add_response("list_training_plans", {"TrainingPlanSummaries": [expired]}, {"NextToken": "t2"})

    found = source.training_plans(REGION)

    assert [r.id for r in found] == [arn, old_arn]  # the expired plan needs no detail call
    plan = found[0]
    assert plan.kind == "training-plan" and plan.instance_type == "ml.p6-b300.48xlarge"
    assert plan.availability_zone == "us-east-2b" and plan.instance_count == 1 and plan.state == "active"
    assert plan.end == dt.datetime(2026, 12, 9, tzinfo=dt.UTC)
    assert found[1].state == "expired"


def test_an_aws_error_reaches_the_caller(source: AwsReservationSource, ec2: Stubber) -> None:
    ec2.add_client_error("describe_capacity_reservations", "UnauthorizedOperation", "You are not authorized", 403)
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        source.capacity_blocks(REGION, P6)
