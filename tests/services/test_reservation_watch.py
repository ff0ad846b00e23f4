"""The reservation watch over time: thresholds once each (across restarts and two watches at once), extension,
cancellation, a reservation that vanishes, escalation when no tested endpoint can take over.
"""

from __future__ import annotations

import datetime as dt

from bot.adapters.clock import FrozenClock
from bot.services.reservations import (
    reservation_overview,
    watch_reservations,
)
from tests.jobs_support import (
    ScriptedReservations,
    capacity_block,
    eks_endpoint,
    make_live,
)
from tests.reservation_support import D, H, alerts, events
from tests.reservation_support import new_ctx as new_ctx
from tests.reservation_support import source as source


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
