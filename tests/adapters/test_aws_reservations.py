"""The AWS reservations adapter against botocore's Stubber (moto implements neither API).

Responses follow the real shapes in reference/protocol-samples/aws/ (a Capacity
Block from ``describe_capacity_reservations``, a HyperPod training plan); the
Stubber rejects any request or response that does not fit AWS's own models.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from bot.adapters.aws.reservations import AwsReservationSource

UTC = dt.UTC
REGION = "us-east-2"
P6 = "p6-b300.48xlarge"


@functools.cache
def _session() -> boto3.Session:
    """One session for the module: it keeps the service models it has read (EC2's alone costs 0.2 CPU-s to load,
    once per session), so each test's own new client and Stubber cost 10 ms, not 200."""
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


# --- what the capacity may carry, records without ReservationType, and AWS failures in words -------------------

def _plan(targets: list[str] | None) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "TrainingPlanArn": f"arn:aws:sagemaker:{REGION}:447714826191:training-plan/kimi-jobs",
        "TrainingPlanName": "kimi-jobs", "Status": "Active",
        "StartTime": dt.datetime(2026, 11, 25, tzinfo=UTC), "EndTime": dt.datetime(2026, 12, 9, tzinfo=UTC),
        "TotalInstanceCount": 1,
        "ReservedCapacitySummaries": [{
            "ReservedCapacityArn": f"arn:aws:sagemaker:{REGION}:447714826191:reserved-capacity/rc-2",
            "InstanceType": "ml.p6-b300.48xlarge", "TotalInstanceCount": 1, "Status": "Active",
            "AvailabilityZone": "us-east-2b",
        }],
    }
    if targets is not None:
        summary["TargetResources"] = targets
    return summary


@pytest.mark.parametrize(
    ("targets", "fits_hyperpod"),
    [(["hyperpod-cluster"], True), (["training-job", "hyperpod-cluster"], True), (["training-job"], False),
     (None, False)],
)
def test_only_plans_targeting_hyperpod_clusters_fit_a_hyperpod_endpoint(source: AwsReservationSource, sagemaker: Stubber,
                                                                         targets: list[str] | None, fits_hyperpod: bool) -> None:
    from bot.config import EndpointSettings
    from bot.domain.expiry import fits, mismatches
    from bot.domain.infrastructure import reservation_checks, select_reservation

    sagemaker.add_response("list_training_plans", {"TrainingPlanSummaries": [_plan(targets)]}, {})
    sagemaker.add_response("describe_training_plan", _plan(targets), {"TrainingPlanName": "kimi-jobs"})
    (plan,) = source.training_plans(REGION)
    assert plan.target_resources == tuple(targets or ())
    endpoint = EndpointSettings(name="kimi-hp", kind="hyperpod", region=REGION, availability_zone="us-east-2b")
    assert fits(plan, endpoint) is fits_hyperpod
    # Neither the watch (as a fit or a replacement) nor the infrastructure gate takes it unless it may carry HyperPod.
    picked = select_reservation([plan], reservation_id=None, instance_type=endpoint.instance_type,
                                availability_zone="us-east-2b", kind="training-plan")
    assert (picked is plan) is fits_hyperpod
    problems = mismatches(plan, endpoint)
    checks = {c.name: c for c in reservation_checks(
        plan, endpoint_kind="hyperpod", instance_type=endpoint.instance_type, availability_zone="us-east-2b",
        node_zones=["us-east-2b"], now=dt.datetime(2026, 11, 26, tzinfo=UTC), warmup=dt.timedelta(hours=1),
        soak=dt.timedelta(hours=1), rollout_window=dt.timedelta(hours=1))}
    if fits_hyperpod:
        assert problems == [] and "reservation.target" not in checks
    else:
        reserved_for = ", ".join(targets or []) or "no resource"
        assert problems == [f"the training plan is reserved for {reserved_for}, not hyperpod-cluster"]
        assert checks["reservation.target"].status == "fail"


@pytest.mark.parametrize(
    ("reservation_type", "tags", "kept"),
    [
        (None, [{"Key": "aws:ec2capacityreservation:capacityReservationType", "Value": "capacity-block"}], True),
        (None, [], False),
        (None, [{"Key": "aws:ec2capacityreservation:capacityReservationType", "Value": "default"}], False),
        ("default", [{"Key": "aws:ec2capacityreservation:capacityReservationType", "Value": "capacity-block"}], False),
    ],
)
def test_a_record_without_reservation_type_falls_back_to_its_tag(source: AwsReservationSource, ec2: Stubber,
                                                                 reservation_type: str | None, tags: list[dict[str, str]],
                                                                 kept: bool) -> None:
    item = capacity_block("cr-0tag", tags=tags)
    if reservation_type is None:
        del item["ReservationType"]
    else:
        item["ReservationType"] = reservation_type
    ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [item]},
                     {"Filters": [{"Name": "instance-type", "Values": [P6]}]})
    assert [r.id for r in source.capacity_blocks(REGION, P6)] == (["cr-0tag"] if kept else [])


@pytest.mark.parametrize(("platform", "fits_eks"), [("Linux/UNIX", True), ("Ubuntu Pro", True), ("Windows", False)])
def test_capacity_blocks_are_checked_for_what_eks_runs(source: AwsReservationSource, ec2: Stubber, platform: str,
                                                       fits_eks: bool) -> None:
    from bot.config import EndpointSettings
    from bot.domain.expiry import fits

    ec2.add_response("describe_capacity_reservations",
                     {"CapacityReservations": [{**capacity_block("cr-0win"), "InstancePlatform": platform}]},
                     {"Filters": [{"Name": "instance-type", "Values": [P6]}]})
    (block,) = source.capacity_blocks(REGION, P6)
    endpoint = EndpointSettings(name="kimi-eks", kind="eks", region=REGION, availability_zone="us-east-2a")
    assert block.platform == platform and fits(block, endpoint) is fits_eks


def test_aws_failures_are_worded_from_the_real_error(source: AwsReservationSource, sagemaker: Stubber) -> None:
    from bot.adapters.aws.errors import aws_error_text

    denied = "User: arn:aws:sts::1:assumed-role/kimi is not authorized to perform: sagemaker:ListTrainingPlans"
    sagemaker.add_client_error("list_training_plans", "AccessDeniedException", denied, 400)
    with pytest.raises(Exception) as caught:
        source.training_plans(REGION)
    assert aws_error_text(caught.value) == (
        "ListTrainingPlans failed: AccessDeniedException: User: arn:aws:sts::1:assumed-role/kimi is not authorized to "
        "perform: sagemaker:ListTrainingPlans")


@pytest.fixture()
def not_aws() -> Iterator[str]:
    """A server on the AWS endpoint's address that is not AWS: it answers 501 to every request (Python's bare
    HTTP handler implements no method), as a proxy or a web server left on a dead stand-in's port does."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Quiet(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_s3_that_is_down_or_not_s3_is_said_as_such(not_aws: str, moto: Any) -> None:
    from botocore.config import Config

    from bot.adapters.aws.artifacts import AWS_ERRORS, S3Objects
    from bot.adapters.aws.errors import aws_error_text

    def s3_at(url: str) -> S3Objects:
        return S3Objects(_session().client("s3", endpoint_url=url, config=Config(retries={"total_max_attempts": 1})))

    def failure(objects: S3Objects) -> str:
        with pytest.raises(AWS_ERRORS) as caught:
            objects.list_prefix("acme-model-weights", "kimi-k3/")
        return aws_error_text(caught.value)

    # Not S3 at all (or a proxy's error page): an HTTP status from something else, never "501: Not Implemented".
    text = failure(s3_at(not_aws))
    assert text.startswith("ListObjectsV2 failed: the endpoint answered HTTP 501 Not Implemented without an AWS error")
    assert "501: Not Implemented" not in text
    # S3 itself (moto) answering with its own error: the code and message as S3 sent them.
    assert failure(s3_at(moto.url)) == "ListObjectsV2 failed: NoSuchBucket: The specified bucket does not exist"
    # Nothing listening.
    assert failure(s3_at("http://127.0.0.1:9")) == "cannot reach the AWS endpoint at http://127.0.0.1:9 (could not connect)"
