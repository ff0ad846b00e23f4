"""Which reservation covers which endpoint: Capacity Blocks and training plans matched by name, zone, instance type
and use, read from AWS through the real adapter or the stored view, in every configured region; a misfit is warned
about once.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from bot.services.context import Ports
from bot.services.reservations import (
    reservation_for,
    reservation_overview,
    watch_reservations,
)
from tests.conftest import START, with_ports
from tests.jobs_support import (
    capacity_block,
    eks_endpoint,
    make_live,
)
from tests.reservation_support import D, H, alerts, events
from tests.reservation_support import new_ctx as new_ctx
from tests.reservation_support import source as source


def test_a_named_reservation_in_the_wrong_zone_is_warned_about_once(new_ctx, source) -> None:
    source.put(capacity_block("cr-0009", ends_in=10 * D, zone="us-east-1b"))
    ctx = new_ctx(endpoints=[eks_endpoint("kimi-prod", reservation_id="cr-0009")])
    watch_reservations(ctx)
    watch_reservations(ctx)
    warnings = [p for k, p in events(ctx) if k == "reservation.mismatch"]
    assert len(warnings) == 1
    assert "zone us-east-1b is not the endpoint's us-east-1a" in warnings[0]["text"] and warnings[0]["channel"] == "CKIMIPROD"


def test_reservation_for_reads_aws_or_the_stored_view(new_ctx, source) -> None:
    source.put(capacity_block("cr-0001", ends_in=3 * D))
    source.put(capacity_block("cr-0002", ends_in=9 * D))
    source.put(capacity_block("cr-0003", ends_in=20 * D, zone="us-east-1c"))
    ctx = new_ctx()
    assert reservation_for(ctx, "kimi-prod").id == "cr-0002"  # latest-ending fit in the endpoint's zone
    assert reservation_for(ctx, "kimi-prod", fresh=False) is None  # the watch has not run yet
    watch_reservations(ctx)
    assert reservation_for(ctx, "kimi-prod", fresh=False).id == "cr-0002"
    view = {v.id: v for v in reservation_overview(ctx)}
    assert view["cr-0001"].left == 3 * D and view["cr-0001"].endpoint == "kimi-prod"
    assert view["cr-0003"].endpoint is None


def test_a_training_plan_named_by_a_hyperpod_endpoint_is_matched_by_name(new_ctx, source) -> None:
    arn = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/kimi-plan"
    source.put(capacity_block("cr-0001", ends_in=10 * D))  # an EKS Capacity Block: not this endpoint's
    source.put(replace(capacity_block(arn, ends_in=30 * H), kind="training-plan", instance_type="ml.p6-b300.48xlarge"))
    ctx = new_ctx(endpoints=[eks_endpoint("kimi-hp", kind="hyperpod", reservation_id="kimi-plan")])
    watch_reservations(ctx)
    view = {v.id: v for v in reservation_overview(ctx)}
    assert view[arn].endpoint == "kimi-hp" and view["cr-0001"].endpoint is None
    assert [t for _, t in alerts(ctx)] == [72.0]
    assert [k for k, _ in events(ctx) if k == "reservation.mismatch"] == []


def test_the_watch_reads_aws_through_the_real_adapter(make_ctx, clock) -> None:
    """AwsReservationSource against the sandbox's capacity stand-in (paged, validated against AWS's models)."""
    from bot.adapters.aws.reservations import AwsReservationSource
    from bot.sandbox.capacity import CapacityStandIn

    aws = CapacityStandIn(page_size=1)
    aws.add_capacity_block("cr-0aaa", region="us-east-1", zone="us-east-1a", start=START - D, end=START + 2 * D)
    aws.add_capacity_block("cr-0p5", region="us-east-1", zone="us-east-1a", start=START - D, end=START + 2 * D,
                           instance_type="p5.48xlarge")
    plan = aws.add_training_plan("kimi-plan", region="us-east-1", zone="us-east-1b", start=START, end=START + 14 * D)
    ctx = make_ctx(endpoints=[eks_endpoint("kimi-prod"),
                              eks_endpoint("kimi-hp", kind="hyperpod", availability_zone="us-east-1b")],
                   ports=Ports(reservations=AwsReservationSource(aws.client_factory())))

    report = watch_reservations(ctx)
    assert sorted(report.appeared) == ["cr-0aaa", "kimi-plan"]  # the p5 block is not watched
    view = {v.id: v for v in reservation_overview(ctx)}
    assert view["cr-0aaa"].endpoint == "kimi-prod" and view[plan].endpoint == "kimi-hp"
    assert [t for _, t in alerts(ctx)] == [72.0]

    aws.extend("cr-0aaa", START + 9 * D)
    aws.remove("kimi-plan")
    report = watch_reservations(ctx)
    assert report.changed == ["cr-0aaa extended"] and report.gone == ["kimi-plan"]
    assert reservation_overview(ctx)[0].left == 9 * D


def test_the_sandbox_covers_each_endpoint_with_the_reservation_it_needs(make_ctx) -> None:
    from bot.adapters.aws.reservations import AwsReservationSource
    from bot.sandbox.capacity import CapacityStandIn

    ctx = make_ctx(endpoints=[eks_endpoint("kimi-eks"),
                              eks_endpoint("kimi-hp", kind="hyperpod", availability_zone="us-east-1b",
                                           reservation_id="kimi-hp-plan")])
    aws = CapacityStandIn()
    ids = {e.name: aws.cover(e, START - D, START + 20 * D) for e in ctx.settings.endpoints}
    ctx = with_ports(ctx, reservations=AwsReservationSource(aws.client_factory()))
    watch_reservations(ctx)
    assert {v.endpoint: v.id for v in reservation_overview(ctx)} == ids
    assert ids["kimi-eks"].startswith("cr-") and ids["kimi-hp"].endswith("training-plan/kimi-hp-plan")
    assert [k for k, _ in events(ctx) if k == "reservation.mismatch"] == []


def test_only_p6_b300_training_plans_and_finished_history_are_left_out(new_ctx, source) -> None:
    arn = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/"
    source.put(replace(capacity_block(arn + "kimi-plan", ends_in=10 * D), kind="training-plan",
                       instance_type="ml.p6-b300.48xlarge"))
    source.put(replace(capacity_block(arn + "p5-plan", ends_in=10 * D), kind="training-plan", instance_type="ml.p5.48xlarge"))
    source.put(capacity_block("cr-0old", ends_in=-30 * D, state="expired"))
    ctx = new_ctx(endpoints=[eks_endpoint("kimi-hp", kind="hyperpod")])
    report = watch_reservations(ctx)
    assert report.appeared == ["kimi-plan"]
    assert [v.id for v in reservation_overview(ctx, include_gone=True)] == [arn + "kimi-plan"]


def test_every_configured_region_is_watched_even_without_an_endpoint_there(new_ctx, source) -> None:
    source.put(replace(capacity_block("cr-0west", ends_in=10 * D, zone="us-west-2a"), region="us-west-2"))
    ctx = new_ctx(aws_regions=["us-east-1", "us-west-2"])
    report = watch_reservations(ctx)
    assert report.appeared == ["cr-0west"]
    [view] = reservation_overview(ctx)
    assert view.region == "us-west-2" and view.endpoint is None


def test_a_named_reservation_of_another_instance_type_is_warned_about_once(new_ctx, source) -> None:
    """The endpoint says p5 but names a p6-b300 block: its manifests would ask for hosts the block does not hold."""
    source.put(capacity_block("cr-0009", ends_in=10 * D))
    ctx = new_ctx(endpoints=[eks_endpoint("kimi-prod", reservation_id="cr-0009", instance_type="p5.48xlarge")])
    watch_reservations(ctx)
    watch_reservations(ctx)
    [warning] = [p for k, p in events(ctx) if k == "reservation.mismatch"]
    assert warning["problems"] == ["instance type p6-b300.48xlarge is not the endpoint's p5.48xlarge"]
    assert warning["problems"][0] in warning["text"] and warning["channel"] == "CKIMIPROD"


def test_a_named_training_plan_of_another_instance_type_is_watched_and_warned_about(new_ctx, source) -> None:
    """Other p5 plans are none of the bot's business, but the one an endpoint names is: it cannot serve Kimi K3."""
    arn = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/kimi-plan"
    source.put(replace(capacity_block(arn, ends_in=10 * D), kind="training-plan", instance_type="ml.p5.48xlarge"))
    ctx = new_ctx(endpoints=[eks_endpoint("kimi-hp", kind="hyperpod", reservation_id="kimi-plan")])
    watch_reservations(ctx)
    watch_reservations(ctx)
    assert [v.endpoint for v in reservation_overview(ctx)] == ["kimi-hp"]
    [warning] = [p for k, p in events(ctx) if k == "reservation.mismatch"]
    assert warning["problems"] == ["instance type ml.p5.48xlarge is not the endpoint's p6-b300.48xlarge"]


def _plan(arn: str, ends_in: dt.timedelta, targets: tuple[str, ...], **changes: object):
    return replace(capacity_block(arn, ends_in=ends_in), kind="training-plan", instance_type="ml.p6-b300.48xlarge",
                   target_resources=targets, **changes)


def test_a_named_training_plan_for_training_jobs_is_warned_about_once_even_across_a_blind_run(new_ctx, source) -> None:
    arn = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/kimi-jobs"
    source.put(_plan(arn, 10 * D, ("training-job",)))
    ctx = new_ctx(endpoints=[eks_endpoint("kimi-hp", kind="hyperpod", reservation_id="kimi-jobs")])
    watch_reservations(ctx)
    source.failing_regions.add("us-east-1")
    watch_reservations(ctx)  # AWS does not answer: nothing is re-judged, nothing is forgotten
    source.failing_regions.clear()
    watch_reservations(ctx)
    [warning] = [p for k, p in events(ctx) if k == "reservation.mismatch"]
    assert warning["problems"] == ["the training plan is reserved for training-job, not hyperpod-cluster"]


def test_a_training_job_plan_is_no_replacement_for_a_hyperpod_endpoint(new_ctx, source) -> None:
    serving = source.put(_plan("arn:aws:sagemaker:us-east-1:123456789012:training-plan/kimi-hp", 2 * D, ("hyperpod-cluster",)))
    source.put(_plan("arn:aws:sagemaker:us-east-1:123456789012:training-plan/jobs", 30 * D, ("training-job",),
                     start=serving.start))
    ctx = new_ctx(endpoints=[eks_endpoint("kimi-hp", kind="hyperpod", reservation_id="kimi-hp")])
    make_live(ctx, "kimi-hp")
    watch_reservations(ctx)
    [(kind, payload)] = [(k, p) for k, p in events(ctx) if "threshold_hours" in p]
    assert kind == "reservation.escalation" and "no tested endpoint or reservation" in payload["text"]
    # The same plan bought for HyperPod clusters does take over.
    source.update("arn:aws:sagemaker:us-east-1:123456789012:training-plan/jobs", target_resources=("hyperpod-cluster",))
    ctx2 = new_ctx(endpoints=[eks_endpoint("kimi-hp", kind="hyperpod", reservation_id="kimi-hp")])
    from bot.domain.expiry import fits
    assert fits(source.items["arn:aws:sagemaker:us-east-1:123456789012:training-plan/jobs"], ctx2.settings.endpoints[0])
