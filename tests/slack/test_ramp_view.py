"""The ramp's live message as people read it: each side's split and last soak window, and when the next step comes."""

from __future__ import annotations

import datetime as dt

from bot.domain.events import RampSplit
from bot.views.parts import Text
from bot.views.ramp import ramp_parts, ramp_text


def _split(**kw: object) -> RampSplit:
    sides = ({"name": "kimi-green", "weight": 25, "cohort": True, "ttft_p99_ms": 812.4, "error_rate": 0.0042,
              "requests": 2400},
             {"name": "kimi-blue", "weight": 75, "ttft_p99_ms": 640.0, "error_rate": 0.0, "requests": 7100})
    return RampSplit(deployment_id=7, endpoint_name="kimi-green", step="25%", sides=sides, **kw)  # type: ignore[arg-type]


def test_a_ramp_step_shows_both_sides_soak_and_when_the_next_step_comes() -> None:
    text = ramp_text(_split(next_step="50%", next_at=dt.datetime(2026, 9, 1, 14, 5, 30, tzinfo=dt.UTC)))
    assert text.splitlines() == [
        ":bar_chart: *Ramp at 25%*",
        "• kimi-green: 25% + internal cohort — TTFT p99 812 ms, errors 0.4% of 2400 requests",
        "• kimi-blue: 75% — TTFT p99 640 ms, errors 0.0% of 7100 requests",
        "Next: 50% at 14:05:30 UTC, if the objectives hold.",
    ]


def test_a_finished_ramp_of_a_service_offers_the_fast_path_back() -> None:
    parts = ramp_parts(_split(outcome="live"), "kimi")
    assert [p.text for p in parts if isinstance(p, Text)] == [
        ramp_text(_split(outcome="live")),
        "Fast path back: `/kimi rollback kimi` (one route change to the side kept warm).",
    ]
    assert ramp_text(_split(outcome="live")).endswith("Done: the ramp is complete.")
