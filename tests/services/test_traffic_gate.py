"""The traffic gate's sweep against the local OpenAI-compatible stand-in made to saturate, over real HTTP.

The knee lands where the server's limit is and the proposal follows the limit;
a latency objective finds its own knee, and so do the queue depth and KV-cache
usage read from ``/metrics``; the sweep stops by itself within its bounds (a
request trickling past its timeout is cut off); an approver's acceptance of the
proposal survives the start-up re-sync.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bot.adapters.clock import FrozenClock
from bot.adapters.endpoint.loadgen import HttpLoadGenerator
from bot.adapters.gate_plots import gate_figure
from bot.adapters.store import schema
from bot.bootstrap import build_context
from bot.config import EndpointSettings, load_settings
from bot.domain.checks import GateReport
from bot.sandbox.openai_server import OpenAIServer
from bot.services.access import Identity
from bot.services.context import Context, Ports
from bot.services.deployments import endpoint_settings, request_deploy
from bot.services.errors import Forbidden, Refused
from bot.services.releases import register_release
from bot.services.traffic_gate import accept_proposed_limits, run_traffic_gate
from bot.services.transitions import store_gate_report
from bot.views.gate_text import render_traffic_report
from tests.workflow_support import (
    APPROVER_1,
    REQUESTER,
    ROLES,
    endpoint_config,
    release_data,
    sweep_ports,
)

SMALL_SWEEP = {
    "ceiling": 16, "warmup_requests": 1, "steady_requests_per_slot": 2, "steady_seconds": 20, "burst_rounds": 2,
    "refine_steps": 3, "max_requests": 1000, "max_seconds": 120, "request_timeout_seconds": 10,
    "max_tokens": 8, "prompt_words": 48,
}
ADAPTER_METRICS_SECONDS = HttpLoadGenerator().metrics_interval  # how often production's sweep reads /metrics
# Requests last ~130 ms, long enough that N clients really overlap at the server despite thread jitter.
FAST = {"reply": "OK, noted.", "first_token_delay": 0.1, "token_delay": 0.005}


@pytest.fixture()
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(**FAST) as srv:
        yield srv


@pytest.fixture()
def sqlite_ctx(tmp_path: Path, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Context]]:
    """The sweep itself touches no database, so those tests run on SQLite only; accepting limits runs on both."""
    monkeypatch.delenv("KIMI_CONFIG", raising=False)
    schema.new_sqlite_at_head(tmp_path / "kimi.db")
    url = f"sqlite:///{tmp_path / 'kimi.db'}"
    made: list[Context] = []

    def factory(*, ports: Ports | None = None, **overrides: object) -> Context:
        ctx = build_context(load_settings(database_url=url, data_dir=tmp_path / "data", **overrides), clock=clock, ports=ports)
        made.append(ctx)
        return ctx

    yield factory
    for ctx in made:
        ctx.close()


def traffic_ctx(make_ctx: Callable[..., Context], url: str, sweep: dict | None = None, objectives: dict | None = None,
                limits: tuple[int, int] = (32, 64), environment: str = "staging", metrics_seconds: float = 0.25,
                **endpoint: object) -> Context:
    """The sweep's mechanics are measured on a staging endpoint (no long-context tail, one prefix mode allowed).

    ``/metrics`` is read every ``metrics_seconds``: four times a second unless a test's knee is a peak read there
    (then as often as the adapter's own default); a level's prefix-cache hit rate needs only its first and last read.
    """
    ctx = make_ctx(
        endpoints=[endpoint_config(url=url, environment=environment, **endpoint,
                                   request_limits={"max_concurrent_requests": limits[0], "max_queue_size": limits[1]})],
        roles=ROLES,
        traffic_sweep=sweep or SMALL_SWEEP,
        traffic_objectives=objectives or {"ttft_p99_ms": 2000},
        ports=sweep_ports(metrics_seconds),
    )
    return ctx


def endpoint(ctx) -> EndpointSettings:
    return endpoint_settings(ctx, "kimi-prod")


def statuses(report: GateReport) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


@pytest.mark.parametrize(("limit", "overflow"), [(6, 429), (12, 503)])
def test_the_knee_is_where_the_server_starts_rejecting_and_the_proposal_follows(sqlite_ctx, server: OpenAIServer, limit: int,
                                                                               overflow: int) -> None:
    server.configure(max_running=limit, max_waiting=0, overflow_status=overflow)  # HyperPod answers either on overflow
    ctx = traffic_ctx(sqlite_ctx, server.url)
    read_counter = ctx.ports.endpoint.metrics
    before = read_counter(endpoint(ctx)).requests_finished

    report = run_traffic_gate(ctx, endpoint(ctx))

    proposal = report.attachments["proposal"]
    assert proposal["max_concurrent_requests"] == limit
    # kimi-ops's own requests are counted as the model's finished counter counts them: the rejected ones never
    # reach it, so users could hide in them if every request sent were subtracted (the closed-door check).
    sweep = report.attachments["sweep"]
    finished = read_counter(endpoint(ctx)).requests_finished
    assert before is not None and finished is not None
    assert sweep["own_requests"] == {"answered": finished - before, "uncertain": 0}
    assert sweep["own_requests"]["answered"] + server.stats().rejected == sweep["requests"]
    assert report.attachments["knee"]["concurrency"] == limit + 1
    assert any("429/503 rate" in b for b in report.attachments["knee"]["broken"])
    levels = report.attachments["sweep"]["levels"]
    assert {lv["prefix"] for lv in levels} == {"shared", "unique"}
    for lv in levels:
        assert (lv["rejected"] > 0) == (lv["concurrency"] > limit)  # rejected requests are recorded per level
    assert statuses(report)["traffic.knee"] == "pass"
    assert statuses(report)["traffic.limits"] == "warn"  # 32 configured, above what was measured safe
    assert report.approvable
    assert server.stats().rejected == sum(lv["rejected"] for lv in levels)
    # No plot is drawn while the gate runs; the notifier draws it later from these stored numbers.
    assert "plot" not in report.attachments
    lat, err = gate_figure(report.model_dump(mode="json"), endpoint="kimi-test", release="rel-b").axes
    assert f"knee at {limit + 1}" in lat.get_title() and f"limit {limit}" in [t.get_text() for t in lat.get_legend().get_texts()]
    assert len(err.get_xticklabels()) == len({lv["concurrency"] for lv in levels})
    text = render_traffic_report(report)
    assert f"maxConcurrentRequests {limit}" in text and f"knee: {limit + 1} concurrent" in text


def test_a_knee_at_the_endpoints_own_admission_limit_says_so(sqlite_ctx, server: OpenAIServer) -> None:
    server.configure(max_running=4, max_waiting=0)  # the endpoint admits exactly what it is configured for
    ctx = traffic_ctx(sqlite_ctx, server.url, sweep={**SMALL_SWEEP, "ceiling": 8, "prefix_modes": ["shared"]}, limits=(4, 0))

    report = run_traffic_gate(ctx, endpoint(ctx))

    limits = next(c for c in report.checks if c.name == "traffic.limits")
    assert report.attachments["proposal"]["max_concurrent_requests"] == 4
    assert limits.status == "pass" and "the endpoint's own admission limit" in limits.reason


def test_prefix_cache_hits_only_with_shared_prefixes(sqlite_ctx, server: OpenAIServer) -> None:
    ctx = traffic_ctx(sqlite_ctx, server.url, sweep={**SMALL_SWEEP, "ceiling": 4})

    report = run_traffic_gate(ctx, endpoint(ctx))

    levels = report.attachments["sweep"]["levels"]
    shared = [lv["prefix_cache_hit_rate"] for lv in levels if lv["prefix"] == "shared"]
    unique = [lv["prefix_cache_hit_rate"] for lv in levels if lv["prefix"] == "unique"]
    assert min(shared) > 0.5
    assert max(unique) == 0.0
    assert "unique prefixes: hit rate 0%" in next(c.reason for c in report.checks if c.name == "traffic.prefix_cache")


def test_a_latency_objective_sets_the_knee_when_nothing_is_rejected(sqlite_ctx, server: OpenAIServer) -> None:
    # Each request already running adds 600 ms before a newcomer's first token: TTFT grows with concurrency,
    # so the worst first token is 1.2 s at 3 clients and 1.8 s at 4. The objective sits 400 ms above the
    # former (client-side overhead only ever adds to a measured TTFT, and a machine busy with other work adds
    # hundreds of ms) and 200 ms below the latter (which needs only the four requests to overlap, and each
    # lasts 600 ms or more; load only makes it later).
    server.configure(max_running=None, first_token_delay=0.0, ttft_per_running=0.6)
    sweep = {**SMALL_SWEEP, "ceiling": 8, "prefix_modes": ["unique"]}
    ctx = traffic_ctx(sqlite_ctx, server.url, sweep=sweep, objectives={"ttft_p99_ms": 1600})

    report = run_traffic_gate(ctx, endpoint(ctx))

    knee = report.attachments["knee"]
    assert knee["concurrency"] == 4 and any("TTFT p99" in b for b in knee["broken"])
    assert report.attachments["proposal"]["max_concurrent_requests"] == 3
    assert all(lv["rejected"] == 0 for lv in report.attachments["sweep"]["levels"])


def test_a_queue_read_from_metrics_sets_the_knee_when_nothing_is_rejected(sqlite_ctx, server: OpenAIServer) -> None:
    # Two requests run at once and the rest wait in the server's queue: no 429, no latency objective within reach,
    # only vllm:num_requests_waiting tells. 4 clients can never have more than 4 waiting (2 wait steadily);
    # at 8, 6 wait steadily (a moment more while a finished client's next request overtakes a waiter's wake-up).
    server.configure(max_running=2, max_waiting=64, first_token_delay=0.2)
    sweep = {**SMALL_SWEEP, "ceiling": 8, "refine_steps": 0, "prefix_modes": ["unique"]}
    ctx = traffic_ctx(sqlite_ctx, server.url, sweep=sweep, objectives={"ttft_p99_ms": 60_000, "queue_depth": 4},
                      metrics_seconds=ADAPTER_METRICS_SECONDS)

    report = run_traffic_gate(ctx, endpoint(ctx))

    knee = report.attachments["knee"]
    (broken,) = knee["broken"]
    assert knee["concurrency"] == 8 and broken.startswith("queue depth ") and broken.endswith(" > 4")
    assert report.attachments["proposal"]["max_concurrent_requests"] == 4
    levels = {lv["concurrency"]: lv for lv in report.attachments["sweep"]["levels"]}
    assert all(lv["rejected"] == 0 for lv in levels.values())
    assert levels[1]["queue_depth"] == 0 and 2 <= levels[4]["queue_depth"] <= 4 and levels[8]["queue_depth"] >= 6
    assert broken in render_traffic_report(report)


def test_kv_cache_usage_read_from_metrics_sets_the_knee(sqlite_ctx, server: OpenAIServer) -> None:
    # Each sweep request holds 58 prompt tokens and up to 8 generated ones in a 220-token KV cache:
    # three running fill at most 90 %, four need more than all of it (the stand-in reports 100 %).
    server.configure(kv_capacity_tokens=220, first_token_delay=0.2)
    sweep = {**SMALL_SWEEP, "ceiling": 8, "prefix_modes": ["unique"], "prompt_words": 58}
    ctx = traffic_ctx(sqlite_ctx, server.url, sweep=sweep, objectives={"ttft_p99_ms": 60_000, "kv_cache_usage": 0.95},
                      metrics_seconds=ADAPTER_METRICS_SECONDS)

    report = run_traffic_gate(ctx, endpoint(ctx))

    knee = report.attachments["knee"]
    assert knee["concurrency"] == 4 and knee["broken"] == ["KV cache 100% > 95%"]
    assert report.attachments["proposal"]["max_concurrent_requests"] == 3
    levels = {lv["concurrency"]: lv for lv in report.attachments["sweep"]["levels"]}
    assert sorted(levels) == [1, 2, 3, 4]
    assert all(lv["rejected"] == 0 for lv in levels.values())
    assert 0.5 < levels[2]["kv_cache_usage"] < levels[3]["kv_cache_usage"] <= 0.9


def test_no_knee_up_to_the_ceiling_proposes_the_ceiling_and_warns(sqlite_ctx, server: OpenAIServer) -> None:
    ctx = traffic_ctx(sqlite_ctx, server.url, sweep={**SMALL_SWEEP, "ceiling": 4, "prefix_modes": ["shared"]})

    report = run_traffic_gate(ctx, endpoint(ctx))

    assert report.attachments["proposal"]["max_concurrent_requests"] == 4
    assert statuses(report)["traffic.knee"] == "warn"
    sweep = report.attachments["sweep"]
    assert [lv["concurrency"] for lv in sweep["levels"]] == [1, 2, 4]
    # One warm-up request, then per level 2 steady and 2 burst requests per client; the warm-up is sent
    # but measured by no level.
    assert [lv["requests"] for lv in sweep["levels"]] == [4, 8, 16]
    assert sweep["requests"] == server.stats().served == 1 + 4 + 8 + 16


def test_the_sweep_stops_by_itself_within_its_request_budget(sqlite_ctx, server: OpenAIServer) -> None:
    ctx = traffic_ctx(sqlite_ctx, server.url, sweep={**SMALL_SWEEP, "ceiling": 64, "max_requests": 25})

    report = run_traffic_gate(ctx, endpoint(ctx))

    sweep = report.attachments["sweep"]
    assert sweep["requests"] <= 25
    assert server.stats().served + server.stats().rejected <= 25
    assert sweep["stopped_early"] == "request budget used up"
    # Levels 1 and 2 complete (1 warm-up + 4 + 8 requests); level 4 would need 16 more and is not reported half-done.
    assert [lv["concurrency"] for lv in sweep["levels"]] == [1, 2]
    assert report.attachments["knee"]["concurrency"] is None
    assert statuses(report)["traffic.sweep"] == "warn"


def test_the_sweep_stops_by_itself_within_its_time_budget(sqlite_ctx, server: OpenAIServer) -> None:
    ctx = traffic_ctx(sqlite_ctx, server.url, sweep={**SMALL_SWEEP, "ceiling": 64, "max_seconds": 1.0})

    report = run_traffic_gate(ctx, endpoint(ctx))

    sweep = report.attachments["sweep"]
    assert sweep["stopped_early"] == "time budget used up"
    assert len(sweep["levels"]) < 7  # 1 … 64 in two prefix modes would be 14 levels
    assert all(lv["requests"] == lv["concurrency"] * 4 for lv in sweep["levels"])  # no level reported half-done


def test_even_one_request_breaking_an_objective_fails_the_gate(sqlite_ctx, server: OpenAIServer) -> None:
    server.configure(first_token_delay=0.2)
    ctx = traffic_ctx(sqlite_ctx, server.url, sweep={**SMALL_SWEEP, "ceiling": 4, "prefix_modes": ["shared"]},
                      objectives={"ttft_p99_ms": 100})

    report = run_traffic_gate(ctx, endpoint(ctx))

    assert statuses(report)["traffic.knee"] == "fail"
    assert report.attachments["proposal"]["max_concurrent_requests"] is None
    assert not report.approvable
    assert [lv["concurrency"] for lv in report.attachments["sweep"]["levels"]] == [1]


def test_a_request_trickling_past_its_timeout_counts_as_an_error(sqlite_ctx, server: OpenAIServer) -> None:
    # Each token comes 0.2 s after the last, inside the 0.5 s request timeout, but eight take 1.4 s in all.
    server.configure(reply="one two three four five six seven eight nine ten", token_delay=0.2)
    sweep = {**SMALL_SWEEP, "ceiling": 4, "prefix_modes": ["shared"], "request_timeout_seconds": 0.5}
    ctx = traffic_ctx(sqlite_ctx, server.url, sweep=sweep, objectives={"ttft_p99_ms": 2000})

    report = run_traffic_gate(ctx, endpoint(ctx))

    (level,) = report.attachments["sweep"]["levels"]
    assert (level["concurrency"], level["ok"], level["errors"]) == (1, 0, 4)
    assert level["broken"] == ["error rate 100% > 1%", "no request succeeded"]
    assert report.status == "error"
    assert "did not answer the sweep (every request failed: timed out)" in report.checks[0].reason


def test_unreachable_endpoint_is_an_error(sqlite_ctx) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = traffic_ctx(sqlite_ctx, f"http://127.0.0.1:{port}", sweep={**SMALL_SWEEP, "ceiling": 2})

    report = run_traffic_gate(ctx, endpoint(ctx))

    assert report.status == "error"
    assert "did not answer the sweep (every request failed: connection refused)" in report.checks[0].reason


def _deployment_with_traffic_report(ctx, report: GateReport) -> int:
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    view = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER)
    with ctx.uow() as uow:
        store_gate_report(uow, ctx, uow.deployments.get(view.id), report)
        uow.commit()
    return view.id


def test_an_approver_accepts_the_proposal_and_it_survives_a_restart(make_ctx, server: OpenAIServer) -> None:
    server.configure(max_running=6, max_waiting=0)
    ctx = traffic_ctx(make_ctx, server.url, sweep={**SMALL_SWEEP, "ceiling": 8, "prefix_modes": ["shared"]})
    report = run_traffic_gate(ctx, endpoint(ctx))
    deployment_id = _deployment_with_traffic_report(ctx, report)

    with pytest.raises(Forbidden):
        accept_proposed_limits(ctx, "kimi-prod", deployment_id, REQUESTER)
    assert endpoint(ctx).effective_request_limits.max_concurrent_requests == 32  # a refusal changes nothing

    accepted = accept_proposed_limits(ctx, "kimi-prod", deployment_id, APPROVER_1)

    # The knee is the stand-in's seventh running request (its exact level is the sweep tests' concern; a machine
    # busy enough to slow first tokens past the objective measures a lower one): what is accepted is what was proposed.
    proposal = report.attachments["proposal"]
    assert 1 <= proposal["max_concurrent_requests"] <= 6
    assert accepted.accepted["max_concurrent_requests"] == proposal["max_concurrent_requests"]
    assert accepted.previous["max_concurrent_requests"] == 32
    limits = endpoint(ctx).effective_request_limits
    assert (limits.max_concurrent_requests, limits.max_queue_size) == (proposal["max_concurrent_requests"],
                                                                     proposal["max_queue_size"])
    with ctx.uow() as uow:
        audit = [a for a in uow.audit.list(subject="endpoint:kimi-prod") if a.action == "endpoint.limits_accepted"]
        assert len(audit) == 1 and audit[0].actor == APPROVER_1.user_id

    # build_context re-syncs endpoints from settings.
    restarted = traffic_ctx(make_ctx, server.url, sweep={**SMALL_SWEEP, "ceiling": 8})
    assert endpoint(restarted).effective_request_limits.max_concurrent_requests == proposal["max_concurrent_requests"]
    assert endpoint(restarted).request_limits.max_concurrent_requests == 32


def test_accepting_needs_a_proposal_for_that_endpoint(make_ctx, server: OpenAIServer) -> None:
    ctx = traffic_ctx(make_ctx, server.url)
    failed = GateReport(gate="traffic", checks=[], attachments={"proposal": {"max_concurrent_requests": None}})
    deployment_id = _deployment_with_traffic_report(ctx, failed)

    with pytest.raises(Refused, match="proposed no limit"):
        accept_proposed_limits(ctx, "kimi-prod", deployment_id, APPROVER_1)
    with pytest.raises(Refused, match="runs on kimi-prod"):
        accept_proposed_limits(ctx, "kimi-other", deployment_id, Identity("U0ADMIN"))
    assert endpoint(ctx).accepted_request_limits is None
