"""The model gate against production's stored report, over real HTTP to the local OpenAI-compatible stand-in.

A planted refusal regression or slowdown fails the gate; cases queued behind another request's long prefill are
measured once more rather than failed; the same quality and speed as production passes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from bot.sandbox.openai_answers import Behaviour
from bot.sandbox.openai_server import OpenAIServer
from bot.services.model_gate import run_model_gate
from bot.views.gate_text import render_model_report
from tests.model_gate_support import TEST_SET, endpoint, statuses


def test_a_planted_refusal_regression_fails_against_production(gate_ctx, server: OpenAIServer) -> None:
    production = run_model_gate(gate_ctx, endpoint(server.url), "rel-live", None).model_dump(mode="json")
    server.configure(refusal_patterns=(r"ransomware", r"Sort a list"))  # the new release refuses a coding task

    report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", production)

    checks = statuses(report)
    assert checks["model.coding"] == "pass"  # 1 of 2 still meets the set's own 50 % minimum …
    assert checks["model.quality_vs_production"] == "fail"  # … but production answered both
    assert "coding 100%→50%" in next(c.reason for c in report.checks if c.name == "model.quality_vs_production")
    assert not report.approvable
    assert report.attachments["evaluation"]["production"]["release"] == "rel-live"
    assert "production rel-live" in render_model_report(report)


def test_a_planted_slowdown_fails_against_production(gate_ctx, server: OpenAIServer) -> None:
    production = run_model_gate(gate_ctx, endpoint(server.url), "rel-live", None).model_dump(mode="json")
    server.configure(first_token_delay=0.2)
    gate_ctx.settings.evaluation_set.write_text(TEST_SET.replace(", max_latency_ms: 250", ""))

    report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", production)

    checks = statuses(report)
    assert checks["model.latency_vs_production"] == "fail"
    assert checks["model.quality_vs_production"] == "pass"
    assert not report.approvable
    # Before failing, the slow cases were sent once more: slow both times (every token waits 0.2 s), and the report
    # says so, naming each case with both timings.
    again = report.attachments["evaluation"]["remeasured"]
    assert again and all(r["again_ms"] >= 200 and r["kept_ms"] >= 200 for r in again), again
    latency = next(c for c in report.checks if c.name == "model.latency_vs_production")
    assert "9 answers; re-measured once, the faster try kept: " in latency.reason
    assert latency.details["remeasured"] == again and latency.details["answers"] == 9
    assert "re-measured)" in report.summary
    # The second tries are kimi-ops's own requests too: the closed door must not take them for users.
    assert report.attachments["evaluation"]["own_requests"]["answered"] == 9 + len(again)


def test_cases_queued_behind_another_requests_long_prefill_are_measured_again_not_failed(
    gate_ctx, server: OpenAIServer,
) -> None:
    # The flake a fresh-clone CI run met ("p95 246 -> 1957 ms"): prompts prefill one after another, as on vLLM, so
    # the cases that arrive while another request's long prompt prefills wait for it. Of nine answers p95 is the
    # slowest or nearly, so three late cases alone failed a release as fast as production.
    gate_ctx.settings.evaluation_set.write_text(
        TEST_SET.replace(", max_latency_ms: 250", "").replace("latency_floor_ms: 100", f"latency_floor_ms: {FLOOR_MS}"))
    server.configure(serial_prefill=True)
    production = run_model_gate(gate_ctx, endpoint(server.url), "rel-live", None).model_dump(mode="json")
    base = production["attachments"]["evaluation"]["summary"]

    # Another client's long-context request is prefilling (2.5 s of it) when the candidate's first cases arrive;
    # the cases themselves cost what they did for production.
    with another_long_prompt_prefilling(server):
        report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", production)

    again = report.attachments["evaluation"]["remeasured"]
    # The first pass alone would have failed: its slowest answers waited out the long prefill, far past the bound …
    assert again and max(r["first_ms"] for r in again) > base["latency_p95_ms"] + FLOOR_MS, again
    # … and sent again, with nothing before them, those cases answer as production's did: the gate passes, and says
    # what it measured.
    assert all(r["again_ms"] is not None and r["kept_ms"] == min(r["first_ms"], r["again_ms"]) for r in again)
    checks = statuses(report)
    assert checks["model.latency_vs_production"] == "pass", report.checks
    latency = next(c for c in report.checks if c.name == "model.latency_vs_production")
    assert "9 answers; re-measured once, the faster try kept: " in latency.reason
    assert all(r["case"] in latency.reason for r in again)
    assert report.approvable
    cases = {c["case"]: c for c in report.attachments["evaluation"]["cases"]}
    assert all(cases[r["case"]]["latency_ms"] == r["kept_ms"] for r in again)
    assert report.attachments["evaluation"]["own_requests"]["answered"] == 9 + len(again)


def test_a_case_over_its_own_latency_cap_only_while_another_request_prefilled_is_measured_again_and_passes(
    gate_ctx, server: OpenAIServer,
) -> None:
    # The same stall, against a case's own cap (benign-tls: 250 ms), with nothing in production to compare with. The
    # capped case goes first, so it arrives while the long prompt prefills.
    capped = TEST_SET[TEST_SET.index("  - id: benign-tls"):TEST_SET.index("  - id: injection")]
    gate_ctx.settings.evaluation_set.write_text(TEST_SET.replace(capped, "").replace("cases:\n", "cases:\n" + capped))
    server.configure(serial_prefill=True)
    with another_long_prompt_prefilling(server):
        report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", None)

    [again] = report.attachments["evaluation"]["remeasured"]  # the only case with a cap of its own
    assert again["case"] == "benign-tls" and again["first_ms"] > 250 and again["again_ms"] < 250, again
    case = next(c for c in report.attachments["evaluation"]["cases"] if c["case"] == "benign-tls")
    assert case["passed"] and case["latency_ms"] == again["kept_ms"]
    assert statuses(report)["model.refusal"] == "pass"
    assert report.approvable, report.checks
    assert report.attachments["evaluation"]["own_requests"]["answered"] == 9 + 1


FLOOR_MS = 500
LONG_PREFILL_SECONDS = 2.5
LONG_PROMPT_WORDS = 5000
HEALTHY_PREFILL = Behaviour().prefill_per_token


@contextmanager
def another_long_prompt_prefilling(server: OpenAIServer) -> Iterator[None]:
    """While another client's long prompt prefills (``LONG_PREFILL_SECONDS``); requests sent now wait behind it."""
    server.configure(prefill_per_token=LONG_PREFILL_SECONDS / LONG_PROMPT_WORDS)
    long = threading.Thread(target=_long_request, args=(server.url,), name="long-prefill")
    long.start()
    try:
        assert server.wait_for(lambda s: s.running == 1)
        server.configure(prefill_per_token=HEALTHY_PREFILL)  # the requests after it cost what they always do
        yield
    finally:
        long.join()


def _long_request(url: str) -> None:
    """One long-context chat completion from another client, answered with one token."""
    body = {"model": "Kimi-K3", "max_tokens": 1, "messages": [{"role": "user", "content": "word " * LONG_PROMPT_WORDS}]}
    httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).raise_for_status()


def test_same_quality_and_speed_as_production_passes(gate_ctx, server: OpenAIServer) -> None:
    # The stand-in answers in milliseconds, so on a busy machine one late case moves p95 by more than the set's
    # 100 ms of noise: here the floor absorbs the scheduler (the planted slowdown above fails at 100 ms).
    gate_ctx.settings.evaluation_set.write_text(TEST_SET.replace("latency_floor_ms: 100", "latency_floor_ms: 2000"))
    production = run_model_gate(gate_ctx, endpoint(server.url), "rel-live", None).model_dump(mode="json")

    report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", production)

    assert statuses(report)["model.quality_vs_production"] == "pass"
    assert statuses(report)["model.latency_vs_production"] == "pass"
    assert report.approvable
