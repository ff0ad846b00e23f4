"""The traffic gate replays production's mix against the stand-in, which costs like vLLM: long prompts fill the KV cache.

Production's mix is read from the stand-in's vLLM request histograms (no payload) or registered as a redacted
trace; the sweep synthesises requests to match it, opens every prod level with a long-context tail, and the
knee and the proposal follow the worst of it. Nothing a request said is stored anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.adapters.endpoint.sweep_requests import prompt_text
from bot.adapters.store.models import Base, CapacityReview, TrafficMixRow
from bot.config import load_settings
from bot.config_error import ConfigError
from bot.sandbox.openai_server import OpenAIServer
from bot.services.access import Identity
from bot.services.capacity import capacity_view, context_review_check
from bot.services.deployments import endpoint_settings
from bot.services.errors import Refused
from bot.services.traffic_gate import run_traffic_gate
from bot.services.traffic_mix import register_trace, update_live_mix
from bot.views.gate_text import render_traffic_report
from tests.workflow_support import ROLES, endpoint_config, sweep_ports

SWEEP = {"ceiling": 8, "warmup_requests": 1, "steady_requests_per_slot": 2, "steady_seconds": 30, "burst_rounds": 1,
         "refine_steps": 1, "max_requests": 2000, "max_seconds": 240, "request_timeout_seconds": 20, "max_tokens": 8,
         "prompt_words": 48}
# A node that prefills 100k tokens/s and holds 120k tokens of KV cache; six requests run, the seventh gets 429.
NODE = {"reply": "OK.", "first_token_delay": 0.05, "token_delay": 0.001, "prefill_per_token": 0.00001,
        "kv_capacity_tokens": 120_000, "max_running": 6, "max_waiting": 0, "max_model_len": 65_536}
DEPLOYER = Identity("U0DEPLOYER")


@pytest.fixture()
def server():
    with OpenAIServer(**NODE) as srv:
        yield srv


def gate_ctx(make_ctx, url: str, sweep: dict | None = None, **endpoint: object):
    return make_ctx(endpoints=[endpoint_config(url=url, max_model_len=65_536, **endpoint)], roles=ROLES,
                    traffic_sweep=sweep or SWEEP, traffic_objectives={"ttft_p99_ms": 10_000, "kv_cache_usage": 0.95},
                    ports=sweep_ports())


def read_live_mix(ctx) -> None:
    """One metrics-watch reading of the endpoint's live mix (the watch does this every minute)."""
    spec = endpoint_settings(ctx, "kimi-prod")
    snapshot = ctx.ports.endpoint.metrics(spec)
    with ctx.uow() as uow:
        update_live_mix(uow, uow.endpoints.get("kimi-prod"), snapshot, ctx)
        uow.commit()


@pytest.mark.sqlite_only  # the sweep's measurement; what it stores is checked on both databases below
def test_a_long_context_heavy_production_mix_finds_a_lower_knee_and_lower_limits(make_ctx, server) -> None:
    ctx = gate_ctx(make_ctx, server.url)
    fixed = run_traffic_gate(ctx, endpoint_settings(ctx, "kimi-prod"))
    # The fixed prompt only meets the server's own limit: past six concurrent requests some are refused.
    assert fixed.attachments["knee"]["concurrency"] == 8
    assert fixed.attachments["proposal"]["max_concurrent_requests"] == 6
    assert fixed.attachments["mix"]["production"] is None
    used = fixed.attachments["mix"]["used"]
    assert used["source"] == "fixed" and [t["tail"] for t in used["tail"]] == ["p99", "max_model_len"]
    assert used["tail"][1]["prompt_tokens"] >= 0.9 * 65_536  # a request near the endpoint's context length

    # Production's traffic: 40 % of requests carry 40,000-token prompts. The server counts it in its histograms,
    # which the metrics watch reads from its first reading on (so the sweep's own requests are not counted).
    read_live_mix(ctx)
    server.simulate(requests=60, prompt_tokens=2_000, output_tokens=20)
    server.simulate(requests=40, prompt_tokens=40_000, output_tokens=20)
    read_live_mix(ctx)
    heavy = run_traffic_gate(ctx, endpoint_settings(ctx, "kimi-prod"))

    production = heavy.attachments["mix"]["production"]
    assert production["source"] == "metrics" and production["requests"] == 100
    # vLLM's 1-2-5 buckets place 40,000 between 20,000 and 50,000: the share is read by interpolation.
    assert production["long_context_share"] >= 0.2 and production["prompt_p90"] >= 32_768
    knee = heavy.attachments["knee"]
    assert knee["concurrency"] < 8 and any(b.startswith("KV cache") for b in knee["broken"])
    assert heavy.attachments["proposal"]["max_concurrent_requests"] < 6
    assert {lv["prefix"] for lv in heavy.attachments["sweep"]["levels"]} == {"shared", "unique"}
    text = render_traffic_report(heavy)
    assert "production: metrics, 100 requests" in text and "replayed: metrics mix" in text
    assert "long-context" in text

    # Each sweep is the endpoint's newest capacity review, with production's mix beside the one replayed.
    view = capacity_view(ctx, "kimi-prod")
    assert view.last_review is not None and view.last_review["knee"] == knee["concurrency"]
    assert view.last_review["production_mix"]["requests"] == 100 and view.drift == []


def test_no_request_payload_is_stored_anywhere(make_ctx, server, tmp_path: Path) -> None:
    server.configure(prefill_per_token=0.000001)
    ctx = gate_ctx(make_ctx, server.url, sweep={**SWEEP, "ceiling": 2})
    read_live_mix(ctx)
    server.simulate(requests=50, prompt_tokens=3_000, output_tokens=50, images=1)
    read_live_mix(ctx)
    trace = b"".join(json.dumps({"prompt_tokens": 900 + i, "output_tokens": 30, "images": i % 2,
                                 "prefix_group": "support"}).encode() + b"\n" for i in range(30))
    register_trace(ctx, "kimi-prod", trace, DEPLOYER)
    report = run_traffic_gate(ctx, endpoint_settings(ctx, "kimi-prod"))
    assert report.attachments["mix"]["used"]["trace_sha256"] is not None  # the trace is what was replayed

    # What the sweep sent: its prompts' words and their closing line. None of it is in the database or on disk.
    markers = [prompt_text("shared", 1, 200)[:120], "reply OK", "Reply OK"]
    with ctx.uow() as uow:
        for table in Base.metadata.sorted_tables:
            for row in uow.session.execute(select(table)).all():
                text = json.dumps([str(v) for v in row])
                assert not any(m in text for m in markers), f"{table.name} holds a request's text"
        assert uow.session.scalars(select(TrafficMixRow)).all() and uow.session.scalars(select(CapacityReview)).all()
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(m.encode() in data for m in markers), f"{path} holds a request's text"


def test_a_trace_holding_text_is_refused_and_nothing_is_stored(make_ctx, server) -> None:
    ctx = gate_ctx(make_ctx, server.url)
    leaked = b'{"prompt_tokens": 12, "output_tokens": 3}\n{"prompt_tokens": 5, "output_tokens": 2, "messages": "hi"}\n'

    with pytest.raises(Refused, match=r"line 2 carries text \(`messages`\)"):
        register_trace(ctx, "kimi-prod", leaked, DEPLOYER)

    assert capacity_view(ctx, "kimi-prod").trace is None


def test_the_unique_prefix_run_cannot_be_dropped_on_prod(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KIMI_CONFIG", raising=False)
    shared_only = {**SWEEP, "prefix_modes": ["shared"]}
    with pytest.raises(ConfigError, match="prefix_modes must include unique while a prod endpoint is declared"):
        load_settings(endpoints=[endpoint_config()], traffic_sweep=shared_only, data_dir=tmp_path)
    # Elsewhere it may be left out (the gate's report warns).
    load_settings(endpoints=[endpoint_config(environment="staging")], traffic_sweep=shared_only, data_dir=tmp_path)


def test_raising_max_model_len_needs_a_capacity_review_since(make_ctx, server) -> None:
    server.configure(prefill_per_token=0.000001)
    ctx = gate_ctx(make_ctx, server.url, sweep={**SWEEP, "ceiling": 1})
    spec = endpoint_settings(ctx, "kimi-prod")
    assert context_review_check(ctx, spec).status == "pass"  # no review yet: the traffic gate makes the first
    run_traffic_gate(ctx, spec)
    assert context_review_check(ctx, spec).status == "pass"

    raised = spec.model_copy(update={"max_model_len": 131_072})
    check = context_review_check(ctx, raised)

    assert check.status == "fail"
    assert "raised from 65,536 to 131,072" in check.reason and "kimi-ops capacity kimi-prod --sweep" in check.reason


def test_the_cli_registers_a_trace_shows_the_capacity_view_and_never_sweeps_users(make_ctx, server, tmp_path,
                                                                                   monkeypatch) -> None:
    from typer.testing import CliRunner

    from bot.cli.main import app

    ctx = gate_ctx(make_ctx, server.url)
    monkeypatch.setattr("bot.cli.common.context", lambda: ctx)
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(b"".join(json.dumps({"prompt_tokens": 500 * (i + 1), "output_tokens": 40}).encode() + b"\n"
                               for i in range(40)))

    shown = CliRunner().invoke(app, ["capacity", "kimi-prod", "--trace", str(trace), "--as", "U0DEPLOYER", "-o", "json"])

    assert shown.exit_code == 0, shown.output
    view = json.loads(shown.output[shown.output.index("{"):])
    assert view["trace"]["mix"]["requests"] == 40 and view["last_review"] is None and view["review_due"] is False
    table = CliRunner().invoke(app, ["capacity", "kimi-prod"])
    assert "no capacity review yet" in table.output and "registered trace sha256" in table.output

    # kimi-prod admits users: an on-demand sweep is refused, and nothing was sent to the model.
    refused = CliRunner().invoke(app, ["capacity", "kimi-prod", "--sweep", "--as", "U0DEPLOYER"])
    assert refused.exit_code != 0 and "a capacity sweep never runs on users" in refused.output
    assert server.stats().served == 0
