"""The reservation watch: thresholds once each (across restarts), extension, cancellation, escalation, fit."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from bot.adapters.clock import FrozenClock
from bot.services.context import Ports
from bot.services.reservations import (
    reservation_for,
    reservation_overview,
    watch_reservations,
)
from tests.conftest import START, with_ports
from tests.jobs_support import (
    ScriptedReservations,
    capacity_block,
    eks_endpoint,
    make_live,
)

H = dt.timedelta(hours=1)
D = dt.timedelta(days=1)


def events(ctx, prefix: str = "reservation.") -> list[tuple[str, dict]]:
    with ctx.uow() as uow:
        return [(e.kind, dict(e.payload)) for e in uow.events.undelivered(limit=10_000) if e.kind.startswith(prefix)]


def alerts(ctx) -> list[tuple[str, float]]:
    return [(kind, p["threshold_hours"]) for kind, p in events(ctx) if kind in {"reservation.alert", "reservation.escalation"}
            and "threshold_hours" in p]


@pytest.fixture()
def source() -> ScriptedReservations:
    return ScriptedReservations()


@pytest.fixture()
def new_ctx(make_ctx, source):
    """A fresh process on the same database: new Context, same settings, same AWS."""
    def factory(**overrides: object):
        overrides.setdefault("endpoints", [eks_endpoint("kimi-prod")])
        overrides.setdefault("oncall_group", "S0ONCALL")
        ctx = make_ctx(**overrides, ports=Ports(reservations=source))
        return ctx
    return factory


def at_remaining(clock: FrozenClock, end: dt.datetime, remaining: dt.timedelta) -> None:
    clock.set(end - remaining)


def test_each_threshold_fires_once_across_a_restart_and_skipped_ones_collapse(new_ctx, source, clock) -> None:
    block = source.put(capacity_block("cr-0001", ends_in=8 * D))
    ctx = new_ctx()
    report = watch_reservations(ctx)
    assert report.appeared == ["cr-0001"] and alerts(ctx) == []
    appeared = [p for k, p in events(ctx) if k == "reservation.appeared"]
    assert len(appeared) == 1 and appeared[0]["channel"] == "CKIMIPROD" and "kimi-prod" in appeared[0]["text"]

    at_remaining(clock, block.end, 6 * D)
    watch_reservations(ctx)
    watch_reservations(ctx)
    assert alerts(ctx) == [("reservation.alert", 168.0)]

    restarted = new_ctx()  # a new process on the same database: nothing is repeated
    watch_reservations(restarted)
    assert alerts(restarted) == [("reservation.alert", 168.0)]

    at_remaining(clock, block.end, 71 * H)
    watch_reservations(restarted)
    # The bot was down from 71 h to 5 h before the end: one alert for 6 h, none for 24 h.
    at_remaining(clock, block.end, 5 * H)
    watch_reservations(new_ctx())
    assert alerts(ctx) == [("reservation.alert", 168.0), ("reservation.alert", 72.0), ("reservation.alert", 6.0)]
    with ctx.uow() as uow:
        assert uow.reservations.get("cr-0001").alerts_sent == [168.0, 72.0, 24.0, 6.0]

    at_remaining(clock, block.end, 30 * dt.timedelta(minutes=1))
    watch_reservations(new_ctx())
    watch_reservations(new_ctx())
    assert [t for _, t in alerts(ctx)] == [168.0, 72.0, 6.0, 1.0]
    text = next(p["text"] for k, p in events(ctx) if p.get("threshold_hours") == 1.0)
    assert "ends in 30 min" in text and "no live release" in text


def test_a_live_endpoint_without_a_replacement_escalates_to_the_oncall_group(new_ctx, source, clock) -> None:
    block = source.put(capacity_block("cr-0001", ends_in=2 * D))
    ctx = new_ctx()
    make_live(ctx, "kimi-prod")
    watch_reservations(ctx)
    [(kind, payload)] = [(k, p) for k, p in events(ctx) if "threshold_hours" in p]
    assert kind == "reservation.escalation" and payload["threshold_hours"] == 72.0
    assert payload["text"].startswith(":rotating_light: <!subteam^S0ONCALL>")
    assert "no tested endpoint or reservation" in payload["text"]
    assert payload["channel"] == "CKIMIPROD"

    # A second block that starts before the first ends and lasts longer is a bare reservation: nothing passed its
    # gates on it, so it is no tested replacement. The page still goes out, and names it as the place to deploy.
    source.put(capacity_block("cr-0002", ends_in=9 * D, starts=block.end - H, state="scheduled"))
    at_remaining(clock, block.end, 20 * H)
    watch_reservations(ctx)
    kind, payload = next((k, p) for k, p in events(ctx) if p.get("threshold_hours") == 24.0)
    assert kind == "reservation.escalation" and "<!subteam^S0ONCALL>" in payload["text"]
    assert "`cr-0002` fits" in payload["text"] and "passed its gates" in payload["text"]


def test_another_live_endpoint_with_longer_capacity_counts_as_a_tested_replacement(new_ctx, source, clock) -> None:
    source.put(capacity_block("cr-0001", ends_in=2 * D))
    source.put(capacity_block("cr-0777", ends_in=30 * D, zone="us-east-1b"))
    ctx = new_ctx(endpoints=[eks_endpoint("kimi-prod"), eks_endpoint("kimi-dr", availability_zone="us-east-1b")])
    make_live(ctx, "kimi-prod")
    make_live(ctx, "kimi-dr")
    watch_reservations(ctx)
    [(kind, payload)] = [(k, p) for k, p in events(ctx) if p.get("reservation_id") == "cr-0001" and "threshold_hours" in p]
    assert kind == "reservation.alert" and "kimi-dr" in payload["text"]


def test_an_extension_rearms_thresholds_and_is_reported(new_ctx, source, clock) -> None:
    block = source.put(capacity_block("cr-0001", ends_in=20 * H))
    ctx = new_ctx()
    watch_reservations(ctx)
    assert [t for _, t in alerts(ctx)] == [24.0]

    source.update("cr-0001", end=block.end + 4 * D)  # extended: 116 h left
    watch_reservations(ctx)
    extended = [p for k, p in events(ctx) if k == "reservation.changed" and p.get("change") == "end"]
    assert len(extended) == 1 and "extended" in extended[0]["text"]
    with ctx.uow() as uow:
        assert uow.reservations.get("cr-0001").alerts_sent == [168.0]  # 72 h and 24 h armed again

    at_remaining(clock, block.end + 4 * D, 70 * H)
    watch_reservations(ctx)
    assert [t for _, t in alerts(ctx)] == [24.0, 72.0]


def test_a_cancelled_reservation_is_reported_and_pages_for_a_live_endpoint(new_ctx, source, clock) -> None:
    source.put(capacity_block("cr-0001", ends_in=10 * D))
    ctx = new_ctx()
    make_live(ctx, "kimi-prod")
    watch_reservations(ctx)
    source.update("cr-0001", state="cancelled")
    report = watch_reservations(ctx)
    assert report.changed == ["cr-0001 active→cancelled"] and report.escalations == ["cr-0001"]
    kinds = [k for k, _ in events(ctx)]
    assert kinds.count("reservation.changed") == 1 and kinds.count("reservation.escalation") == 1
    watch_reservations(ctx)
    assert [k for k, _ in events(ctx)] == kinds  # nothing repeated


def test_a_vanished_reservation_is_reported_once_and_an_unreadable_region_changes_nothing(new_ctx, source) -> None:
    source.put(capacity_block("cr-0001", ends_in=10 * D))
    ctx = new_ctx()
    watch_reservations(ctx)

    source.failing_regions.add("us-east-1")
    report = watch_reservations(ctx)
    watch_reservations(ctx)
    assert report.gone == [] and "us-east-1" in report.errors[0]
    assert [v.id for v in reservation_overview(ctx)] == ["cr-0001"]
    [(kind, blind)] = [(k, p) for k, p in events(ctx) if k.startswith("reservation.watch")]
    assert kind == "reservation.watch_failed" and "Could not connect" in blind["text"] and blind["channel"] == "CKIMIPROD"

    source.failing_regions.clear()
    source.remove("cr-0001")
    assert watch_reservations(ctx).gone == ["cr-0001"]
    watch_reservations(ctx)
    gone = [p for k, p in events(ctx) if k == "reservation.gone"]
    assert len(gone) == 1 and "no longer listed" in gone[0]["text"]
    watch_events = [k for k, _ in events(ctx) if k.startswith("reservation.watch")]
    assert watch_events == ["reservation.watch_failed", "reservation.watch_recovered"]
    assert reservation_overview(ctx) == [] and reservation_overview(ctx, include_gone=True)[0].gone_at is not None
    with ctx.uow() as uow:
        actions = [a.action for a in uow.audit.list(subject="reservation:cr-0001")]
    assert actions.count("reservation.gone") == 1 and "reservation.appeared" in actions


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


def test_two_watches_at_once_on_postgres_send_each_alert_once(fresh_pg_url, clock, tmp_path, monkeypatch) -> None:
    """A manual `jobs run` racing the scheduled watch: the row lock makes the second see the first's alert.

    A third transaction holds the reservation row while both watches start, so both are
    certainly in flight together (each waiting on that row) before either can go on.
    """
    import threading

    from sqlalchemy import create_engine, text

    from bot.adapters.store import schema
    from bot.bootstrap import build_context
    from bot.config import load_settings

    monkeypatch.delenv("KIMI_CONFIG", raising=False)
    schema.upgrade(fresh_pg_url)
    source = ScriptedReservations()
    block = source.put(capacity_block("cr-0001", ends_in=10 * D))
    contexts = [
        build_context(load_settings(database_url=fresh_pg_url, data_dir=tmp_path, endpoints=[eks_endpoint("kimi-prod")]),
                      clock=clock, reservations=source)
        for _ in range(2)
    ]
    holder = create_engine(fresh_pg_url)
    try:
        watch_reservations(contexts[0])
        at_remaining(clock, block.end, 6 * D)
        errors: list[BaseException] = []

        def run(c) -> None:
            try:
                watch_reservations(c)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(c,)) for c in contexts]
        with holder.connect() as conn:
            conn.execute(text("SELECT id FROM reservations FOR UPDATE"))
            for t in threads:
                t.start()

            def waiting() -> int:
                with holder.connect() as watcher:
                    return int(watcher.execute(text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )).scalar() or 0)

            while waiting() < 2:  # both watches are blocked on the held row (a hang is caught by the join below)
                threading.Event().wait(0.05)
            conn.rollback()  # let them go
        for t in threads:
            t.join(60)
        assert errors == []
        assert alerts(contexts[0]) == [("reservation.alert", 168.0)]
    finally:
        holder.dispose()
        for c in contexts:
            c.close()


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


def test_a_live_endpoint_without_any_visible_reservation_is_flagged_once(new_ctx, source) -> None:
    ctx = new_ctx(endpoints=[eks_endpoint("kimi-prod", reservation_id="cr-0typo")])
    make_live(ctx, "kimi-prod")
    watch_reservations(ctx)
    watch_reservations(ctx)
    [(kind, payload)] = [(k, p) for k, p in events(ctx) if k in {"reservation.missing", "reservation.found"}]
    assert kind == "reservation.missing" and "cr-0typo" in payload["text"] and "<!subteam^S0ONCALL>" in payload["text"]

    source.put(capacity_block("cr-0typo", ends_in=30 * D))
    watch_reservations(ctx)
    said = [k for k, _ in events(ctx) if k in {"reservation.missing", "reservation.found"}]
    assert said == ["reservation.missing", "reservation.found"]


def test_a_cancelled_reservation_sends_no_more_threshold_alerts(new_ctx, source, clock) -> None:
    block = source.put(capacity_block("cr-0001", ends_in=10 * D))
    ctx = new_ctx()
    watch_reservations(ctx)
    source.update("cr-0001", state="cancelled")
    watch_reservations(ctx)
    for left in (6 * D, 71 * H, 20 * H, 5 * H, 30 * dt.timedelta(minutes=1)):
        at_remaining(clock, block.end, left)
        watch_reservations(ctx)
    assert alerts(ctx) == []  # its capacity is gone already: counting down to its old end would mislead


def test_a_vanished_reservation_behind_a_live_endpoint_pages_once(new_ctx, source) -> None:
    source.put(capacity_block("cr-0001", ends_in=10 * D))
    ctx = new_ctx()
    make_live(ctx, "kimi-prod")
    watch_reservations(ctx)
    source.remove("cr-0001")
    report = watch_reservations(ctx)
    watch_reservations(ctx)
    assert report.gone == ["cr-0001"] and report.escalations == ["cr-0001"]
    [page] = [p for k, p in events(ctx) if k == "reservation.escalation"]
    assert page["text"].startswith(":rotating_light: <!subteam^S0ONCALL>") and "disappeared" in page["text"]
    assert page["channel"] == "CKIMIPROD"


def test_a_reservation_starting_after_the_end_is_no_replacement(new_ctx, source, clock) -> None:
    """A gap between two blocks is an outage: the second one cannot take over, so the live endpoint pages."""
    block = source.put(capacity_block("cr-0001", ends_in=2 * D))
    source.put(capacity_block("cr-0002", ends_in=9 * D, starts=block.end + 2 * H, state="scheduled"))
    ctx = new_ctx()
    make_live(ctx, "kimi-prod")
    watch_reservations(ctx)
    [(kind, payload)] = [(k, p) for k, p in events(ctx) if p.get("reservation_id") == "cr-0001" and "threshold_hours" in p]
    assert kind == "reservation.escalation" and "<!subteam^S0ONCALL>" in payload["text"]


def test_an_endpoint_without_a_live_release_is_no_replacement(new_ctx, source) -> None:
    """Capacity behind an endpoint nobody has deployed and tested on cannot take the traffic over."""
    source.put(capacity_block("cr-0001", ends_in=2 * D))
    source.put(capacity_block("cr-0777", ends_in=30 * D, zone="us-east-1b"))
    ctx = new_ctx(endpoints=[eks_endpoint("kimi-prod"), eks_endpoint("kimi-dr", availability_zone="us-east-1b")])
    make_live(ctx, "kimi-prod")
    watch_reservations(ctx)
    [(kind, payload)] = [(k, p) for k, p in events(ctx) if p.get("reservation_id") == "cr-0001" and "threshold_hours" in p]
    assert kind == "reservation.escalation" and "kimi-dr" not in payload["text"]


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


def test_the_thresholds_are_the_configured_ones(new_ctx, source, clock) -> None:
    block = source.put(capacity_block("cr-0001", ends_in=50 * H))
    ctx = new_ctx(alert_thresholds_hours=[48, 12])
    watch_reservations(ctx)
    assert alerts(ctx) == []  # 72 h is not configured here
    at_remaining(clock, block.end, 47 * H)
    watch_reservations(ctx)
    at_remaining(clock, block.end, 11 * H)
    watch_reservations(ctx)
    assert [t for _, t in alerts(ctx)] == [48.0, 12.0]


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
