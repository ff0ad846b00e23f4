"""Readiness probes: alert after N failures or N slow answers, one recovery message, no storm, no probe while closed."""

from __future__ import annotations

import datetime as dt
import pytest

from bot.domain.readiness import ReadinessResult
from bot.services.readiness import endpoint_status, probe_endpoints
from bot.services.reservations import watch_reservations
from tests.jobs_support import DOWN, OK, SLOW, ScriptedEndpoint, ScriptedReservations, capacity_block, eks_endpoint, make_live

def messages(ctx) -> list[tuple[str, str]]:
    with ctx.uow() as uow:
        return [(e.kind, e.payload["text"]) for e in uow.events.undelivered(limit=10_000) if e.kind.startswith("readiness.")]


@pytest.fixture()
def probe(make_ctx, clock):
    endpoint = ScriptedEndpoint()
    ctx = make_ctx(endpoints=[eks_endpoint("kimi-prod", ttft_objective_ms=2000)], oncall_group="S0ONCALL",
                   readiness_failures_to_alert=3)
    ctx.adapters["endpoint"] = endpoint
    make_live(ctx, "kimi-prod")

    def run(answer: ReadinessResult, times: int = 1) -> None:
        endpoint.answer = answer
        for _ in range(times):
            clock.advance(dt.timedelta(minutes=5))
            probe_endpoints(ctx)

    return ctx, endpoint, run


def test_failures_alert_after_n_then_one_recovery_and_no_storm(probe) -> None:
    ctx, _, run = probe
    run(DOWN, 2)
    assert messages(ctx) == []
    run(DOWN)
    [(kind, text)] = messages(ctx)
    assert kind == "readiness.alert" and "<!subteam^S0ONCALL>" in text and "connection refused" in text
    run(DOWN, 5)
    assert len(messages(ctx)) == 1  # one open incident, no storm
    run(OK, 3)
    assert [k for k, _ in messages(ctx)] == ["readiness.alert", "readiness.recovered"]
    assert "answering again" in messages(ctx)[1][1] and "180 ms" in messages(ctx)[1][1]
    with ctx.uow() as uow:
        actions = [a.action for a in uow.audit.list(subject="endpoint:kimi-prod")]
    assert actions.count("incident.opened") == 1 and actions.count("incident.closed") == 1

    run(DOWN, 3)  # a new outage is a new incident
    assert [k for k, _ in messages(ctx)] == ["readiness.alert", "readiness.recovered", "readiness.alert"]


def test_a_pass_between_failures_resets_the_count(probe) -> None:
    ctx, _, run = probe
    run(DOWN, 2)
    run(OK)
    run(DOWN, 2)
    assert messages(ctx) == []


def test_slow_first_tokens_alert_with_the_objective_and_recover(probe) -> None:
    ctx, _, run = probe
    run(SLOW, 3)
    [(kind, text)] = messages(ctx)
    assert kind == "readiness.alert" and "2000 ms objective" in text and "4200 ms" in text
    run(SLOW, 4)
    assert len(messages(ctx)) == 1
    run(OK)
    assert messages(ctx)[-1][0] == "readiness.recovered" and "first-token objective" in messages(ctx)[-1][1]


def test_no_probe_while_admission_is_closed_or_nothing_is_live(probe, make_ctx) -> None:
    ctx, endpoint, run = probe
    with ctx.uow() as uow:
        uow.endpoints.get("kimi-prod").admission_open = False
        uow.commit()
    run(DOWN, 5)
    assert endpoint.calls == {} and messages(ctx) == []
    outcome = probe_endpoints(ctx)
    assert outcome[0].skipped == "admission closed"
    with ctx.uow() as uow:
        assert list(uow.readiness.recent(uow.endpoints.get("kimi-prod").id)) == []


def test_status_shows_last_probe_history_and_reservation_countdown(probe, clock) -> None:
    ctx, _, run = probe
    source = ScriptedReservations()
    source.put(capacity_block("cr-0001", ends_in=dt.timedelta(days=3)))
    ctx.adapters["reservations"] = source
    watch_reservations(ctx)
    run(OK)
    run(DOWN, 3)
    [status] = endpoint_status(ctx, "kimi-prod")
    assert status.live_release == "rel-live" and status.admission_open
    assert status.last_probe is not None and not status.last_probe.ok and status.last_probe.failure_kind == "connection_refused"
    assert [p.ok for p in status.recent_probes] == [False, False, False, True]
    assert status.recent_probes[-1].ttft_ms == 180.0 and status.recent_probes[-1].total_ms == 950.0
    assert [i.kind for i in status.incidents] == ["readiness"]
    assert status.reservation is not None and status.reservation.id == "cr-0001"
    assert status.reservation.remaining == dt.timedelta(days=3, minutes=-20) and status.reservation_left == "3.0 days"


def test_an_answer_arriving_after_admission_closed_is_dropped(probe) -> None:
    ctx, endpoint, run = probe

    class ClosesMidProbe(ScriptedEndpoint):
        def readiness(self, spec):
            with ctx.uow() as uow:  # a rollback closes admission while the completion is in flight
                uow.endpoints.get(spec.name).admission_open = False
                uow.commit()
            return DOWN

    ctx.adapters["endpoint"] = ClosesMidProbe()
    [outcome] = probe_endpoints(ctx)
    assert not outcome.probed and outcome.skipped == "admission closed during the probe"
    with ctx.uow() as uow:
        assert list(uow.readiness.recent(uow.endpoints.get("kimi-prod").id)) == []


def test_an_adapter_that_raises_counts_as_a_failed_probe(probe) -> None:
    ctx, _, run = probe

    class Broken(ScriptedEndpoint):
        def readiness(self, spec):
            raise OSError("[Errno 111] Connection refused")

    ctx.adapters["endpoint"] = Broken()
    for _ in range(3):
        [outcome] = probe_endpoints(ctx)
    assert outcome.probed and not outcome.result.ok and outcome.opened == ("readiness",)
    assert "Connection refused" in messages(ctx)[0][1]
