"""Text from outside kimi-ops reaches Slack as typed, never as a mention, a channel-wide notification or a link.

A real Alertmanager sends an alert whose annotations hold Slack's markup to the running app's webhook; people
type the same markup as a silence reason (the Silence… form) and as ``/kimi admission close … --reason``. Every
post and edit the Slack stub records shows it escaped as Slack's "Escaping text" asks (``&lt;!channel&gt;``),
and no recorded call carries the live markup. A bare Slack user id typed in a reason (``ping U0ABCDEF12``) arrives
as typed, pinging nobody, while the person kimi-ops names (``silenced by``) is still a mention.
"""

from __future__ import annotations

import datetime as dt
import json

import httpx
import pytest

from bot.adapters.clock import FrozenClock
from bot.sandbox.slack_text import as_slack_shows
from bot.views.actions import INCIDENT_SILENCE
from tests.alertmanager_support import routed_alertmanager
from tests.slack_support import blocks_text
from tests.world_support import wait_until

TOKEN = "am-webhook-token-escaping-0123456789"
HOSTILE = "<!channel> <@U123> <https://x|y>"
ESCAPED = "&lt;!channel&gt; &lt;@U123&gt; &lt;https://x|y&gt;"
LIVE_MARKUP = ("<!channel>", "<@U123>", "<https://x|y>", "<@U0ABCDEF12>", "\u2060")
PING = "ping U0ABCDEF12"
LABELS = {"alertname": "KimiOpsErrorBudgetBurn", "endpoint": "kimi-prod", "objective": "ttft", "severity": "page",
          "kimi_ops_kind": "burn-page:ttft", "release": "rel-b"}


@pytest.fixture()
def clock() -> FrozenClock:
    return FrozenClock(dt.datetime.now(dt.UTC))  # Alertmanager refuses silences that ended in the past


@pytest.fixture()
def routed(make_ctx, tmp_path):
    with routed_alertmanager(make_ctx, tmp_path, TOKEN) as both:
        yield both


def no_live_markup(stub) -> None:
    """No Web API call the app made carries the outside markup unescaped (text, blocks, updates, modals)."""
    for call in stub.calls:
        sent = json.dumps(call.params, default=str, ensure_ascii=False)
        assert not [m for m in LIVE_MARKUP if m in sent], (call.method, sent[:600])


def test_alert_annotations_and_typed_reasons_reach_slack_escaped(routed) -> None:
    bench, manager = routed
    alert = {"labels": LABELS, "annotations": {"summary": HOSTILE, "description": HOSTILE},
             "generatorURL": "http://prometheus/graph"}
    assert httpx.post(f"{manager.url}/api/v2/alerts", json=[alert], timeout=10).status_code == 200
    [page] = wait_until("the page in the endpoint's channel",
                        lambda: [m for m in bench.stub.messages if m.ephemeral_to is None and m.thread_ts is None
                                 and "burn-page:ttft" in blocks_text(m.blocks)])
    assert ESCAPED in blocks_text(page.blocks) and ESCAPED in page.text
    assert HOSTILE in as_slack_shows(blocks_text(page.blocks))  # what people read: the text as it was written

    bench.click("U0DEPLOYER", page, INCIDENT_SILENCE)
    view = bench.stub.wait_for(lambda s: s.calls_to("views.open"))[-1].params["view"]
    bench.post(bench.sender.submit("U0DEPLOYER", view, {"reason": {"reason": f"soak {HOSTILE} {PING}"},
                                                        "hours": {"hours": "4"}}))
    bench.stub.wait_for(lambda s: "silenced by <@U0DEPLOYER>" in blocks_text(page.blocks)
                        and f"soak {ESCAPED} {PING}" in blocks_text(page.blocks))

    assert bench.slash("U0ADMIN", f"admission close kimi-prod --reason hold {HOSTILE} {PING}").status_code == 200
    told = bench.stub.wait_for(lambda s: [m for m in s.messages
                                          if f"hold {ESCAPED} {PING}" in m.text + blocks_text(m.blocks)])
    assert told
    assert bench.app.wait_idle(30)
    no_live_markup(bench.stub)
    with bench.app.ctx.uow() as uow:  # stored as it came: only what is posted is escaped
        [incident] = [i for incidents in uow.incidents.open_by_endpoint(["burn-page:ttft"]).values() for i in incidents]
        assert HOSTILE in incident.reason and incident.silence_reason == f"soak {HOSTILE} {PING}"
