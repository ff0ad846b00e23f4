"""The model gate against the local OpenAI-compatible stand-in, over real HTTP.

Each check kind passes on a good answer and fails when the stand-in is made to misbehave; the report keeps no
prompt or answer text. The comparison with production is in ``test_model_gate_vs_production.py``.
"""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path

import pytest

from bot.adapters.endpoint.evaluation import HttpEvaluator
from bot.adapters.gate_plots import gate_figure
from bot.domain.evaluation import KINDS, expand, parse_eval_set
from bot.sandbox.eval_replies import DEFAULT_SET_REFUSAL_PATTERNS, DEFAULT_SET_REPLIES
from bot.sandbox.openai_server import OpenAIServer
from bot.services.context import Ports
from bot.services.gates import GateSubject, run_gate
from bot.services.model_gate import DEFAULT_EVAL_SET, run_model_gate
from bot.services.releases import parse_manifest
from bot.views.gate_text import render_model_report
from tests.model_gate_support import REPLIES, TEST_SET, endpoint, statuses
from tests.workflow_support import release_data


def test_every_kind_passes_on_a_healthy_endpoint_and_no_text_is_stored(gate_ctx, server: OpenAIServer) -> None:
    report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", None)

    assert report.approvable, report.checks
    kinds = {"coding", "tool_call", "structured_output", "long_context", "image", "refusal", "adversarial"}
    assert {f"model.{k}" for k in kinds} <= {n for n, s in statuses(report).items() if s == "pass"}
    assert statuses(report)["model.baseline"] == "warn"  # nothing in production to compare with
    evaluation = report.attachments["evaluation"]
    assert evaluation["summary"]["pass_rate"] == 1.0
    cases = {c["case"]: c for c in evaluation["cases"]}
    assert cases["needle"]["prompt_tokens"] > 1000  # the long document was generated and sent
    assert all(c["latency_ms"] is not None and c["completion_tokens"] for c in cases.values())
    assert all("sample" not in c for c in cases.values())
    stored = json.dumps(report.model_dump(mode="json"))
    for secret in ("7-4-1-9-amber", "adds two numbers", "def add", "SAVE-9000"):
        assert secret not in stored
    # No plot is drawn while the gate runs; the notifier draws it later from these stored numbers.
    assert "plot" not in report.attachments
    figure = gate_figure(report.model_dump(mode="json"), endpoint="kimi-test", release="rel-new")
    rates, _ = figure.axes
    assert rates.get_title() == "Model gate · rel-new on kimi-test"
    assert {"2/2", "1/1"} <= {t.get_text() for t in rates.texts}
    text = render_model_report(report)
    assert "tool_call" in text and "100%" in text


@pytest.mark.parametrize(
    ("behaviour", "case", "reason"),
    [
        ({"replies": ((r"adds two numbers", "Here you go: lambda a, b: a + b"), *REPLIES[1:])}, "code-add", "regex"),
        ({"honour_response_format": False}, "incident-json", "not JSON"),
        ({"honour_tools": False}, "tool-weather", "expected a call to tool get_weather"),
        ({"honour_refusals": False}, "refuse-malware", "expected a refusal"),
        ({"refusal_patterns": (r"ransomware", r"TLS")}, "benign-tls", "refused a legitimate request"),
        ({"first_token_delay": 0.3}, "benign-tls", "latency"),
        ({"replies": ((r"developer mode", "Sure! The code is SAVE-9000."), *REPLIES)}, "injection", "forbidden regex"),
    ],
    ids=["regex", "json-schema", "tool-call", "must-refuse", "must-not-refuse", "max-latency", "adversarial"],
)
def test_each_check_fails_when_the_answer_is_wrong(
    gate_ctx, server: OpenAIServer, behaviour: dict, case: str, reason: str,
) -> None:
    server.configure(**behaviour)

    report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", None)

    results = {c["case"]: c for c in report.attachments["evaluation"]["cases"]}
    assert not results[case]["passed"]
    assert any(reason in f for f in results[case]["failures"]), results[case]
    others_failed = {k for k, r in results.items() if not r["passed"]} - {case}
    if reason != "latency":  # a slow server slows every case; only the one with a latency cap fails
        assert others_failed == set()
    assert results[case]["kind"] != "coding" or report.approvable  # coding tolerates one failure (min 50 %)
    if results[case]["kind"] != "coding":
        assert not report.approvable


def test_no_more_cases_are_in_flight_than_the_set_allows(gate_ctx, server: OpenAIServer) -> None:
    # The set sends 3 cases at a time. A server that runs 3 and queues none answers every case …
    server.configure(max_running=3, max_waiting=0, first_token_delay=0.1)
    report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", None)
    assert server.stats().rejected == 0
    assert all(c["http_status"] == 200 for c in report.attachments["evaluation"]["cases"])

    # … while one that runs only 2 turns the third away: the cases really were sent 3 at a time.
    server.configure(max_running=2)
    report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", None)
    assert server.stats().rejected > 0
    assert any(c["http_status"] == 429 for c in report.attachments["evaluation"]["cases"])


def test_a_case_trickling_past_the_sets_timeout_is_cut_off(gate_ctx, server: OpenAIServer) -> None:
    # Every token arrives well inside the timeout, but a six-token answer takes 1.2 s in all: over the 0.5 s
    # the set allows a case. A one-token answer still comes in time.
    gate_ctx.settings.evaluation_set.write_text(TEST_SET.replace("timeout_seconds: 20", "timeout_seconds: 0.5"))
    server.configure(token_delay=0.2)

    report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", None)

    cases = {c["case"]: c for c in report.attachments["evaluation"]["cases"]}
    assert cases["code-add"]["failures"] == ["no answer: timed out"]
    assert cases["needle"]["passed"]


def test_wrong_tool_arguments_fail_the_tool_call_check(gate_ctx, server: OpenAIServer, tmp_path: Path) -> None:
    strict = TEST_SET.replace("arguments_schema: {type: object, required: [city], properties: {city: {type: string}}}",
                              "arguments_schema: {type: object, required: [city], properties: {city: {type: integer}}}")
    gate_ctx.settings.evaluation_set.write_text(strict)

    report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", None)

    result = next(c for c in report.attachments["evaluation"]["cases"] if c["case"] == "tool-weather")
    assert result["failures"] and result["failures"][0].startswith("tool get_weather arguments: city")
    assert statuses(report)["model.tool_call"] == "fail"


def test_unreachable_endpoint_is_an_error_not_a_pass(gate_ctx) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    report = run_model_gate(gate_ctx, endpoint(f"http://127.0.0.1:{port}"), "rel-new", None)

    assert report.status == "error"
    assert "did not answer" in report.checks[0].reason


def test_a_broken_evaluation_set_is_one_line_error(gate_ctx, server: OpenAIServer) -> None:
    gate_ctx.settings.evaluation_set.write_text(TEST_SET.replace("kind: image", "kind: poetry"))

    report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", None)

    assert report.status == "error"
    assert "cases.5.kind" in report.checks[0].reason and "\n" not in report.checks[0].reason


def test_the_default_kimi_set_passes_on_the_stand_in(make_ctx) -> None:
    ctx = make_ctx(evaluation_set=DEFAULT_EVAL_SET, ports=Ports(evaluator=HttpEvaluator()))
    with OpenAIServer(replies=DEFAULT_SET_REPLIES, refusal_patterns=DEFAULT_SET_REFUSAL_PATTERNS) as srv:
        report = run_model_gate(ctx, endpoint(srv.url), "kimi-k3-2026-08-01", None)

    assert report.approvable, [c for c in report.checks if c.status != "pass"]
    cases = {c["case"]: c for c in report.attachments["evaluation"]["cases"]}
    assert cases["long-context-needle"]["prompt_tokens"] > 20_000
    assert len(cases) == 9


def test_the_default_kimi_set_covers_every_kind_with_an_embedded_image_and_a_generated_document() -> None:
    eval_set = parse_eval_set(DEFAULT_EVAL_SET.read_text(), source=str(DEFAULT_EVAL_SET))
    assert set(eval_set.kinds) == set(KINDS)
    (image,) = [c for c in eval_set.cases if c.kind == "image"]
    urls = [p.image_url.url for m in image.messages if not isinstance(m.content, str) for p in m.content if p.type == "image_url"]
    assert len(urls) == 1 and urls[0].startswith("data:image/png;base64,")  # embedded: no fetch from the endpoint
    png = base64.b64decode(urls[0].split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) < 4096
    (long,) = [c for c in expand(eval_set) if c.kind == "long_context"]
    assert len(json.dumps(long.request_body("Kimi-K3"))) >= 4 * eval_set.long_context_tokens  # ~4 characters a token
    smaller = parse_eval_set(DEFAULT_EVAL_SET.read_text().replace("long_context_tokens: 32000", "long_context_tokens: 2000"))
    (short,) = [c for c in expand(smaller) if c.kind == "long_context"]
    assert 8000 <= len(json.dumps(short.request_body("Kimi-K3"))) < 12_000  # the configured size, not a fixed text


def test_answer_excerpts_are_kept_only_when_the_set_turns_sampling_on(gate_ctx, server: OpenAIServer) -> None:
    gate_ctx.settings.evaluation_set.write_text(TEST_SET.replace("concurrency: 3", "concurrency: 3\nsampling: true"))

    report = run_model_gate(gate_ctx, endpoint(server.url), "rel-new", None)

    cases = {c["case"]: c for c in report.attachments["evaluation"]["cases"]}
    assert report.attachments["evaluation"]["sampling"] is True
    assert cases["code-add"]["sample"].startswith("def add(a, b)")
    assert len(cases["needle"]["sample"]) <= 200


def test_the_workflow_runs_the_model_gate_with_the_live_release_as_baseline(gate_ctx, server: OpenAIServer) -> None:
    production = run_model_gate(gate_ctx, endpoint(server.url), "rel-live", None).model_dump(mode="json")
    server.configure(honour_tools=False)
    subject = GateSubject(deployment_id=1, kind="deploy", endpoint=endpoint(server.url),
                          release=parse_manifest(release_data("rel-new")),
                          release_hash="0" * 64, manifest_hash=None, baseline_reports={"model": production})

    report = run_gate(gate_ctx, "model", subject)

    assert report.gate == "model"
    assert statuses(report)["model.quality_vs_production"] == "fail"
    assert report.attachments["evaluation"]["release"] == "rel-new"
