"""The pure threshold rules: whatever the watch's timing, each threshold is announced at most once and none is lost."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from bot.domain.expiry import format_remaining, rearm, threshold_to_announce

THRESHOLDS = [168.0, 72.0, 24.0, 6.0, 1.0]


@given(st.lists(st.floats(min_value=-5, max_value=400, allow_nan=False), min_size=1, max_size=30))
def test_each_threshold_is_announced_once_for_the_smallest_crossed(hours_left: list[float]) -> None:
    sent: set[float] = set()
    announced: list[float] = []
    for hours in sorted(hours_left, reverse=True):  # time only moves forward
        fire, after = threshold_to_announce(dt.timedelta(hours=hours), THRESHOLDS, sent)
        crossed = {t for t in THRESHOLDS if hours <= t}
        assert after == sent | crossed  # nothing crossed is ever forgotten
        if fire is not None:
            assert fire == min(crossed - sent)  # one alert, for the smallest newly crossed
            announced.append(fire)
        sent = after
    assert len(announced) == len(set(announced))


def test_an_extension_rearms_only_what_is_no_longer_crossed() -> None:
    assert rearm(dt.timedelta(hours=100), {168.0, 72.0, 24.0}) == {168.0}
    fire, _ = threshold_to_announce(dt.timedelta(hours=70), THRESHOLDS, {168.0})
    assert fire == 72.0


def test_time_left_reads_like_a_person_would_say_it() -> None:
    assert format_remaining(dt.timedelta(days=3, hours=12)) == "3.5 days"
    assert format_remaining(dt.timedelta(hours=5, minutes=30)) == "5.5 h"
    assert format_remaining(dt.timedelta(minutes=40)) == "40 min"
    assert format_remaining(dt.timedelta(seconds=-1)) == "ended"
    assert format_remaining(None) == "no end date"
