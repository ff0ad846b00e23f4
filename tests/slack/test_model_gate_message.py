"""The model gate's message in Slack: pass rates and latency beside production's in a table that fits Slack's limits
(the rest in the thread), and each gate's plot drawn and uploaded once (none for a report without numbers).

The messages are rendered by the real blocks adapter; the plots go through the real notifier to the Slack Web API stub.
"""

from __future__ import annotations

import json

from slack_sdk import WebClient

from bot.adapters.slack.blocks import MAX_BLOCKS, SECTION_CHARS, render
from bot.adapters.slack.notifier import SlackNotifier
from bot.domain.checks import Check, GateReport
from bot.sandbox.slack_stub import SlackStub
from bot.services.deployments import request_deploy
from bot.services.releases import register_release
from bot.services.transitions import store_gate_report
from bot.views.gates import gate_parts
from tests.slack_support import CHANNEL
from tests.workflow_support import REQUESTER, ROLES, endpoint_config, release_data


def model_report(kinds: dict[str, tuple[int, int, int, int]], production: str | None = "rel-live") -> GateReport:
    """A model report: per kind (passed now, total, passed in production, total) plus latency percentiles."""
    def summary(i: int) -> dict:
        return {"kinds": {k: {"passed": v[i], "total": v[i + 1], "pass_rate": v[i] / v[i + 1]} for k, v in kinds.items()},
                "latency_p50_ms": 812.0 + i, "latency_p95_ms": 2410.0 + i, "ttft_p50_ms": 120.0, "ttft_p95_ms": 310.0}
    evaluation = {"release": "rel-new", "set": "kimi-k3-default", "version": 1, "summary": summary(0), "cases": [],
                  "production": {"release": production, "summary": summary(2)} if production else None}
    return GateReport(gate="model", checks=[Check.passed("model.quality_vs_production", "no kind fell")],
                      attachments={"evaluation": evaluation})


def sections(rendered) -> list[str]:
    return [b["text"]["text"] for b in rendered.blocks if b["type"] == "section"]


def test_the_model_gate_message_shows_pass_rates_and_latency_beside_production() -> None:
    kinds = {"coding": (2, 2, 2, 2), "refusal": (1, 2, 2, 2), "tool_call": (3, 3, 3, 3)}
    rendered = render(gate_parts(model_report(kinds), deployment_id=4, release="rel-new", endpoint="kimi-prod", actors=()))
    table = next(s for s in sections(rendered) if "Compared with production (rel-live)" in s)
    lines = table.split("\n")
    assert lines[1] == "```" and lines[-1] == "```"
    assert lines[2].split() == ["kind", "passed", "this", "release", "production", "rel-live"]
    assert "refusal" in table and "1/2" in table and "50%" in table and "100%" in table
    assert any(ln.startswith("latency p95 ms") and "2410" in ln and "2412" in ln for ln in lines)
    assert not rendered.overflow

    first = render(gate_parts(model_report(kinds, production=None), deployment_id=4, release="rel-new", endpoint="kimi-prod",
                              actors=()))
    assert "Compared with production" not in json.dumps(first.blocks)  # no baseline, no comparison


def test_a_comparison_too_long_for_one_section_is_summarised_and_posted_whole_in_the_thread() -> None:
    kinds = {f"kind_{i:03d}_with_a_long_descriptive_name": (i % 3, 3, 3, 3) for i in range(120)}
    rendered = render(gate_parts(model_report(kinds), deployment_id=4, release="rel-new", endpoint="kimi-prod", actors=()))
    assert len(rendered.blocks) <= MAX_BLOCKS and all(len(s) <= SECTION_CHARS for s in sections(rendered))
    shown = next(s for s in sections(rendered) if "Compared with production" in s)
    assert shown.count("```") == 2 and "more rows in the thread below" in shown
    whole = "\n".join(rendered.overflow)
    assert all(f"kind_{i:03d}" in whole for i in range(120)) and "latency p95 ms" in whole
    assert all(piece.startswith("```") and piece.endswith("```") and len(piece) <= SECTION_CHARS for piece in rendered.overflow)


def test_each_gate_plot_is_drawn_and_uploaded_once_and_a_report_without_numbers_gets_none(make_ctx) -> None:
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES)
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    view = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER)
    kinds = {"coding": (2, 2, 2, 2), "refusal": (1, 2, 2, 2)}
    with ctx.uow() as uow:
        dep = uow.deployments.get(view.id)
        store_gate_report(uow, ctx, dep, model_report(kinds))
        # A sweep the endpoint never answered: its report says so, and there is nothing to draw.
        store_gate_report(uow, ctx, dep, GateReport(gate="traffic", checks=[Check.errored("traffic.sweep", "no answer")],
                                                    attachments={"sweep": {"levels": []}}))
        store_gate_report(uow, ctx, dep, GateReport(gate="infrastructure", checks=[Check.passed("cluster.access", "ok")]))
        uow.commit()
    with SlackStub() as stub:
        notifier = SlackNotifier(WebClient(token="xoxb-t", base_url=stub.api_url), ctx.uow, ctx.clock)
        notifier.deliver_pending()
        notifier.deliver_pending()  # a second pass (another replica, a restart) sends nothing again
        files = stub.files_in(CHANNEL)
        uploaded = [(m.files[0]["name"], u.data is not None and u.data[:4] == b"\x89PNG") for m, u in files]
        assert uploaded == [("kimi-prod-rel-a-model-pass-rates.png", True)]
        assert not [m for m in stub.messages if "plot" in m.text]  # no note for a plot there is no reason to draw
    with ctx.uow() as uow:
        assert all(e.delivered_at is not None for e in uow.events.for_deployment(view.id))
        assert [e.payload["gate"] for e in uow.events.for_deployment(view.id) if e.kind == "gate.plot"] == ["model"]
