"""Readiness probes against the local OpenAI-compatible stand-in through the real endpoint client.

Alert after N failures or N slow first tokens, one recovery message, no storm,
no probe while admission is closed, and what ``/kimi status`` shows afterwards.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator

import pytest

from bot.adapters.endpoint.openai import HttpEndpointClient
from bot.sandbox.openai_server import OpenAIServer
from bot.services.context import Ports
from bot.services.readiness import endpoint_status, probe_endpoints
from bot.services.reservations import watch_reservations
from tests.conftest import with_ports
from tests.jobs_support import (
    ScriptedEndpoint,
    ScriptedReservations,
    capacity_block,
    eks_endpoint,
    make_live,
)

OBJECTIVE_MS = 800
HEALTHY = {"fail_status": None, "first_token_delay": 0.0}
BROKEN = {"fail_status": 500}
SLOW = {"fail_status": None, "first_token_delay": 1.0}  # 1 s to the first token against an 800 ms objective


def messages(ctx) -> list[tuple[str, str]]:
    with ctx.uow() as uow:
        return [(e.kind, e.payload["text"]) for e in uow.events.undelivered(limit=10_000) if e.kind.startswith("readiness.")]


@pytest.fixture()
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


@pytest.fixture()
def probe(make_ctx, clock, server):
    ctx = make_ctx(endpoints=[eks_endpoint("kimi-prod", url=server.url, ttft_objective_ms=OBJECTIVE_MS)],
                   oncall_group="S0ONCALL", readiness_failures_to_alert=3,
                   ports=Ports(endpoint=HttpEndpointClient(timeout=30)))
    make_live(ctx, "kimi-prod")

    def run(behaviour: dict, times: int = 1) -> None:
        server.configure(**behaviour)
        for _ in range(times):
            clock.advance(dt.timedelta(minutes=5))
            probe_endpoints(ctx)

    return ctx, run


def test_failures_alert_after_n_then_one_recovery_and_no_storm(probe) -> None:
    ctx, run = probe
    run(BROKEN, 2)
    assert messages(ctx) == []
    run(BROKEN)
    [(kind, text)] = messages(ctx)
    assert kind == "readiness.alert" and "<!subteam^S0ONCALL>" in text
    assert "HTTP 500" in text or "EngineCore" in text  # the reason the endpoint gave
    run(BROKEN, 5)
    assert len(messages(ctx)) == 1  # one open incident, no storm
    run(HEALTHY, 3)
    assert [k for k, _ in messages(ctx)] == ["readiness.alert", "readiness.recovered"]
    assert "answering again" in messages(ctx)[1][1] and "first token" in messages(ctx)[1][1]
    with ctx.uow() as uow:
        actions = [a.action for a in uow.audit.list(subject="endpoint:kimi-prod")]
    assert actions.count("incident.opened") == 1 and actions.count("incident.closed") == 1

    run(BROKEN, 3)  # a new outage is a new incident
    assert [k for k, _ in messages(ctx)] == ["readiness.alert", "readiness.recovered", "readiness.alert"]


def test_a_pass_between_failures_resets_the_count(probe) -> None:
    ctx, run = probe
    run(BROKEN, 2)
    run(HEALTHY)
    run(BROKEN, 2)
    assert messages(ctx) == []


def test_slow_first_tokens_alert_with_the_objective_and_recover(probe) -> None:
    ctx, run = probe
    run(HEALTHY, 3)
    run(SLOW, 2)
    assert messages(ctx) == []  # two slow answers are not yet a pattern
    run(SLOW)
    [(kind, text)] = messages(ctx)
    assert kind == "readiness.alert" and f"{OBJECTIVE_MS} ms objective" in text
    run(SLOW)
    assert len(messages(ctx)) == 1
    run(HEALTHY)
    assert messages(ctx)[-1][0] == "readiness.recovered" and "first-token objective" in messages(ctx)[-1][1]


def test_no_probe_while_admission_is_closed(probe, server) -> None:
    ctx, run = probe
    with ctx.uow() as uow:
        uow.endpoints.get("kimi-prod").admission_open = False
        uow.commit()
    run(HEALTHY, 5)
    assert (server.stats().served, server.stats().rejected) == (0, 0) and messages(ctx) == []
    assert probe_endpoints(ctx)[0].skipped == "admission closed"
    with ctx.uow() as uow:
        assert list(uow.readiness.recent(uow.endpoints.get("kimi-prod").id)) == []


def test_an_answer_arriving_after_admission_closed_is_dropped(probe, server) -> None:
    ctx, _ = probe
    server.configure(**HEALTHY)
    server.hold()  # the completion waits before its first token

    def rollback_closes_admission() -> None:
        server.wait_for(lambda s: s.running >= 1, timeout=90)
        with ctx.uow() as uow:
            uow.endpoints.get("kimi-prod").admission_open = False
            uow.commit()
        server.release()

    closer = threading.Thread(target=rollback_closes_admission)
    closer.start()
    [outcome] = probe_endpoints(ctx)
    closer.join(30)
    assert not outcome.probed and outcome.skipped == "admission closed during the probe"
    with ctx.uow() as uow:
        assert list(uow.readiness.recent(uow.endpoints.get("kimi-prod").id)) == []


def test_an_adapter_that_raises_counts_as_a_failed_probe(probe) -> None:
    """A guard against adapter bugs: the real client never raises, so a scripted port raises here."""
    ctx, _ = probe

    class Broken(ScriptedEndpoint):
        def readiness(self, spec):
            raise OSError("[Errno 111] Connection refused")

    ctx = with_ports(ctx, endpoint=Broken())
    for _ in range(3):
        [outcome] = probe_endpoints(ctx)
    assert outcome.probed and not outcome.result.ok and outcome.opened == ("readiness",)
    assert "Connection refused" in messages(ctx)[0][1]


def test_status_shows_last_probe_history_and_reservation_countdown(probe, server) -> None:
    ctx, run = probe
    source = ScriptedReservations()
    source.put(capacity_block("cr-0001", ends_in=dt.timedelta(days=3)))
    ctx = with_ports(ctx, reservations=source)
    watch_reservations(ctx)
    run(HEALTHY)
    run(BROKEN, 3)
    [status] = endpoint_status(ctx, "kimi-prod")
    assert status.live_release == "rel-live" and status.admission_open
    assert status.last_probe is not None and not status.last_probe.ok and status.last_probe.failure_kind == "http_status"
    assert status.last_probe.http_status == 500
    assert [p.ok for p in status.recent_probes] == [False, False, False, True]
    oldest = status.recent_probes[-1]
    assert oldest.http_status == 200 and oldest.ttft_ms is not None and oldest.total_ms >= oldest.ttft_ms
    assert [i.kind for i in status.incidents] == ["readiness"]
    assert status.reservation is not None and status.reservation.id == "cr-0001"
    assert status.reservation.left == dt.timedelta(days=3, minutes=-20) and status.reservation_left == "3.0 days"


def test_one_recovery_message_when_both_incidents_end_together(probe) -> None:
    ctx, run = probe
    run(SLOW, 3)
    run(BROKEN, 3)  # failures say nothing about first-token speed: the slow incident stays open
    assert [k for k, _ in messages(ctx)] == ["readiness.alert", "readiness.alert"]
    run(HEALTHY)
    assert [k for k, _ in messages(ctx)] == ["readiness.alert", "readiness.alert", "readiness.recovered"]
    assert "answering and within its first-token objective again" in messages(ctx)[-1][1]
    [status] = endpoint_status(ctx, "kimi-prod")
    assert status.incidents == []


def test_only_endpoints_with_a_live_release_are_probed(make_ctx) -> None:
    endpoint = ScriptedEndpoint()
    ctx = make_ctx(endpoints=[eks_endpoint("kimi-prod"), eks_endpoint("kimi-next")], ports=Ports(endpoint=endpoint))
    make_live(ctx, "kimi-prod")
    outcomes = {o.endpoint: o for o in probe_endpoints(ctx)}
    assert endpoint.calls == {"kimi-prod": 1}
    assert outcomes["kimi-prod"].probed and outcomes["kimi-next"].skipped == "no live release"


def test_a_fleet_is_probed_several_endpoints_at_once_never_more_than_the_setting(make_ctx, clock, server) -> None:
    """Probes run KIMI_PROBE_CONCURRENCY at a time on one shared client: a slow endpoint no longer holds up the
    others (a fleet fits in the probe's period), and the fleet is never asked all at once."""
    names = [f"kimi-{n}" for n in range(5)]
    client = HttpEndpointClient(timeout=30)
    ctx = make_ctx(endpoints=[eks_endpoint(n, url=server.url) for n in names], probe_concurrency=3,
                   ports=Ports(endpoint=client))
    for name in names:
        make_live(ctx, name)
    server.configure(**HEALTHY)
    server.hold()  # every completion waits before its first token
    seen: list[int] = []

    def watch_then_release() -> None:
        seen.append(int(server.wait_for(lambda s: s.running >= 3, timeout=90)))
        seen.append(int(server.wait_for(lambda s: s.running > 3, timeout=0.5)))  # a fourth must not start
        server.release()

    releaser = threading.Thread(target=watch_then_release)
    releaser.start()
    outcomes = probe_endpoints(ctx)
    releaser.join(30)
    assert seen == [1, 0]
    assert [o.endpoint for o in outcomes if o.probed and o.result and o.result.ok] == names
    assert server.stats().served == 5
    client.close()
