"""A gate's report is stored, posted and decidable before its plot is drawn; the plot follows in the thread.

The engine runs the model gate for real against the local OpenAI-compatible stand-in (the default evaluation
set); the other ports are the workflow doubles. The notifier delivers to the Slack Web API stub.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from slack_sdk import WebClient

from bot.adapters.endpoint.evaluation import HttpEvaluator
from bot.adapters.slack.notifier import SlackNotifier
from bot.sandbox.eval_replies import DEFAULT_SET_REFUSAL_PATTERNS, DEFAULT_SET_REPLIES
from bot.sandbox.openai_server import OpenAIServer
from bot.sandbox.slack_stub import SlackStub
from bot.services.deployments import decide_gate, get_deployment, request_deploy
from bot.services.engine import Engine
from bot.services.releases import register_release
from tests.workflow_support import ADMIN, APPROVER_1, REQUESTER, ROLES, endpoint_config, fake_ports, release_data

CHANNEL = "C0PROD"


@pytest.fixture()
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(replies=DEFAULT_SET_REPLIES, refusal_patterns=DEFAULT_SET_REFUSAL_PATTERNS, first_token_delay=0.0,
                      token_delay=0.0) as srv:
        yield srv


def test_the_model_gate_is_posted_and_approvable_before_its_plot_is_drawn(make_ctx, server: OpenAIServer) -> None:
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL, url=server.url)], roles=ROLES,
                   ports=fake_ports(evaluator=HttpEvaluator()))
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    engine = Engine(ctx, readiness_pause=0)
    view = engine.advance(request_deploy(ctx, "rel-a", None, REQUESTER).id)
    for gate, approver in (("artifact", APPROVER_1), ("infrastructure", ADMIN)):
        assert view.pending is not None and view.pending.gate == gate, view
        decide_gate(ctx, view.id, gate, "approved", approver, seen_report_hash=view.pending.report_hash,
                    seen_release_hash=view.pending.release_hash)
        view = engine.advance(view.id)
    assert view.pending is not None and view.pending.gate == "model", view
    reports = ctx.settings.data_dir / "reports"

    # The report waits in the outbox to be posted; no plot was drawn, and none is asked for yet.
    with ctx.uow() as uow:
        row = uow.gates.latest(view.id, "model")
        assert row is not None and row.report["attachments"]["evaluation"]["summary"]["kinds"]
        row_id = row.id
        kinds = [e.kind for e in uow.events.for_deployment(view.id)]
    assert "gate.waiting" in kinds and "gate.plot" not in kinds
    assert not list(reports.glob("*.png"))

    with SlackStub() as stub:
        notifier = SlackNotifier(WebClient(token="xoxb-t", base_url=stub.api_url), ctx.uow, ctx.clock, plot_dir=reports)
        # Approved on the report as stored, before any plot exists: the decision is bound to the report's numbers.
        decide_gate(ctx, view.id, "model", "approved", APPROVER_1, seen_report_hash=view.pending.report_hash,
                    seen_release_hash=view.pending.release_hash)
        assert not list(reports.glob("*.png"))
        assert get_deployment(ctx, view.id).gates[-1].decision == "approved"

        notifier.deliver_pending()
        methods = [c.method for c in stub.calls]
        posted = next(i for i, c in enumerate(stub.calls) if c.method == "chat.postMessage"
                      and (c.params.get("metadata") or {}).get("event_payload", {}).get("key") == f"gate:{row_id}")
        assert posted < methods.index("files.getUploadURLExternal")  # the message first, then the picture
        ((message, upload),) = [(m, u) for m, u in stub.files_in(CHANNEL) if "model" in m.files[0]["name"]]
        assert message.files[0]["name"] == "kimi-prod-rel-a-model-pass-rates.png"
        (kept,) = reports.glob("*.png")
        assert upload.data == kept.read_bytes()
    with ctx.uow() as uow:
        events = [(e.id, e.kind, e.payload.get("gate")) for e in uow.events.for_deployment(view.id)]
    waiting = next(i for i, kind, gate in events if kind == "gate.waiting" and gate == "model")
    drawn = next(i for i, kind, gate in events if kind == "gate.plot" and gate == "model")
    assert waiting < drawn
