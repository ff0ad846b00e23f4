"""The ramp's steps, soak-window judgement, gate deadlines, drift and the closed-door count (pure rules)."""

from __future__ import annotations

import datetime as dt

import pytest

from bot.domain.drift import Observed, Recorded, compare
from bot.domain.gate_deadlines import Due, GateClock, words
from bot.domain.own_requests import OwnRequests, counted, reach_since
from bot.domain.ramp import (
    Window,
    WindowObjectives,
    breaches,
    bucket_delta,
    next_step,
    ramp_steps,
    window_summary,
)
from bot.domain.readiness import MetricsSnapshot

T0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def snapshot(finished: float) -> MetricsSnapshot:
    return MetricsSnapshot(None, None, None, None, None, None, requests_finished=finished)


def test_the_ramp_starts_with_the_internal_cohort_and_ends_open_whatever_the_order_of_shares() -> None:
    steps = ramp_steps([50, 5, 25, 100, 0, 5])
    assert steps == ("internal", "5%", "25%", "50%", "open")
    assert next_step(steps, None) == "internal"
    assert next_step(steps, "25%") == "50%"
    assert next_step(steps, "open") is None


def test_a_window_inside_the_objectives_holds_and_each_breach_names_value_and_bound() -> None:
    objectives = WindowObjectives(ttft_p99_ms=2000, error_rate=0.01, queue_depth=8, kv_cache_usage=0.9)
    good = Window(requests=200, errors=1, ttft_p99_ms=900, peak_waiting=2, peak_kv_cache_usage=0.5, seconds=300)
    assert breaches(good, objectives) == []
    bad = Window(requests=200, errors=10, ttft_p99_ms=2600, peak_waiting=12, peak_kv_cache_usage=0.97, seconds=300)
    found = breaches(bad, objectives)
    assert found == [
        "error rate 5.0% above 1.0% (10 of 200)",
        "first-token p99 2600 ms above 2000 ms",
        "queue depth 12 above 8",
        "KV-cache usage 97% above 90%",
    ]


def test_a_window_without_user_requests_cannot_breach_rates_and_says_it_saw_nothing() -> None:
    empty = Window(requests=0, errors=0, ttft_p99_ms=None, peak_waiting=0, peak_kv_cache_usage=0.1, seconds=60)
    assert breaches(empty, WindowObjectives(ttft_p99_ms=1)) == []
    assert window_summary(empty) == "no user requests in 60 s"


def test_histogram_deltas_count_only_the_window_and_survive_a_server_restart() -> None:
    before = [(0.1, 10.0), (1.0, 20.0), (float("inf"), 25.0)]
    after = [(0.1, 12.0), (1.0, 30.0), (float("inf"), 40.0)]
    assert bucket_delta(before, after) == [(0.1, 2.0), (1.0, 10.0), (float("inf"), 15.0)]
    restarted = [(0.1, 1.0), (1.0, 1.0), (float("inf"), 2.0)]
    assert bucket_delta(before, restarted) == restarted


def test_a_gate_is_reminded_once_at_half_time_and_expires_at_the_end() -> None:
    clock = GateClock(waiting_since=T0, allowed=dt.timedelta(minutes=30))
    assert clock.due(T0 + dt.timedelta(minutes=14), reminded=False) is Due.NOTHING
    assert clock.due(T0 + dt.timedelta(minutes=15), reminded=False) is Due.REMIND
    assert clock.due(T0 + dt.timedelta(minutes=20), reminded=True) is Due.NOTHING
    assert clock.due(T0 + dt.timedelta(minutes=30), reminded=False) is Due.EXPIRE
    assert words(clock.left(T0 + dt.timedelta(minutes=16))) == "14 min"
    assert words(dt.timedelta(hours=2, minutes=5)) == "2 h 5 min"


def test_drift_names_each_field_where_the_cluster_differs_and_an_unread_cluster_is_not_agreement() -> None:
    recorded = Recorded(release="kimi-k3-2026-08-01", release_hash="aaa", image="img@sha256:1",
                        limits={"max_concurrent_requests": 8}, admission="open")
    same = Observed(release="kimi-k3-2026-08-01", release_hash="aaa", image="img@sha256:1",
                    limits={"max_concurrent_requests": 8}, admission="open", route_accepted=True)
    assert compare(recorded, same) == []
    other = Observed(release="kimi-k3-2026-09-01", release_hash="bbb", image="img@sha256:2",
                     limits={"max_concurrent_requests": 16}, admission="closed", route_accepted=False)
    assert [d.words for d in compare(recorded, other)] == [
        "release: kimi-ops recorded kimi-k3-2026-08-01, the cluster has kimi-k3-2026-09-01",
        "image: kimi-ops recorded img@sha256:1, the cluster has img@sha256:2",
        "request limits: kimi-ops recorded max_concurrent_requests=8, the cluster has max_concurrent_requests=16",
        "admission: kimi-ops recorded open, the cluster has closed",
        "route: kimi-ops recorded accepted by its gateway, the cluster has not accepted",
    ]
    assert [d.field for d in compare(recorded, None)] == ["cluster"]


@pytest.mark.parametrize(
    ("status", "complete", "kind"),
    [(200, True, "answered"), (429, False, "never"), (503, False, "never"), (400, False, "never"),
     (200, False, "uncertain"), (500, False, "uncertain"), (None, False, "uncertain")],
)
def test_each_own_request_is_classed_as_the_finished_counter_counts_it(status: int | None, complete: bool, kind: str) -> None:
    assert counted(status, complete) == kind


def test_users_cannot_hide_in_kimi_ops_own_rejected_requests() -> None:
    # The sweep sent 100 requests, 30 of them refused at the door (never counted); 30 user requests got through.
    own = OwnRequests()
    for kind in ["answered"] * 70 + ["never"] * 30:
        own = own.plus(counted(200 if kind == "answered" else 429, kind == "answered"))
    reach = reach_since(snapshot(1000.0), snapshot(1100.0), own)
    assert reach is not None and reach.users == 30 and not reach.proven_closed


def test_finished_requests_within_kimi_ops_own_broken_ones_are_unproven_not_closed() -> None:
    own = OwnRequests(answered=70, uncertain=5)
    inside = reach_since(snapshot(0.0), snapshot(73.0), own)
    assert inside is not None and inside.users == 0 and not inside.proven_closed
    closed = reach_since(snapshot(0.0), snapshot(70.0), own)
    assert closed is not None and closed.proven_closed
    assert reach_since(snapshot(0.0), MetricsSnapshot(None, None, None, None, None, None), own) is None  # no counter
    restarted = reach_since(snapshot(500.0), snapshot(71.0), own)  # the server restarted: its counter began at zero
    assert restarted is not None and restarted.users == 0 and restarted.beyond_answered == 1


def test_a_soak_holds_the_candidate_to_the_endpoints_service_objectives_where_it_declares_them() -> None:
    from bot.config import EndpointSettings
    from bot.domain.ramp import Window
    from bot.services.objectives import RampObjectives

    window = Window(requests=40, errors=0, ttft_p99_ms=800, peak_waiting=0, peak_kv_cache_usage=0.2, seconds=10)
    declared = EndpointSettings(name="kimi-prod", ttft_objective_ms=2000, slo={"ttft_p99_ms": 500})
    assert RampObjectives().breaches(declared, window) == ["first-token p99 800 ms above 500 ms"]
    assert RampObjectives().breaches(EndpointSettings(name="kimi-prod", ttft_objective_ms=2000), window) == []
