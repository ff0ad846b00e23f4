"""Correctly signed Slack requests from another app, workspace or organisation, sent over HTTP into the running app.

Each row of :data:`FOREIGN` is acknowledged with 200, runs nothing, tells nobody, and leaves one audit row; the
workspace and organisation settings override what ``auth.test`` says, and without an app id the app does not start.
A new finding is one more row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import pytest

from bot.bootstrap import build_root
from bot.config import ConfigError
from bot.sandbox.slack_stub import Message, SlackStub
from bot.slack.app import create_app
from bot.views.actions import (
    ACCEPT_AND_APPROVE,
    ACCEPT_LIMITS,
    APPROVE,
    APPROVE_ABOVE_LIMITS,
    INCIDENT_ACK,
    INCIDENT_ROLLBACK,
    INCIDENT_SILENCE,
    RECHECK,
    REJECT,
    SHOW_CHECKS,
)
from tests.slack_requests_support import FORM, JSON, click, form, slash, user
from tests.slack_requests_support import bench as bench
from tests.slack_support import CHANNEL, SlackBench, has_buttons, start_bench, stop_bench
from tests.workflow_support import ROLES, endpoint_config

# The Slack edge (or the CLI's wording) is what is tested here, not the store: SQLite only (tests/conftest.py).
pytestmark = pytest.mark.sqlite_only


# ---------------------------------------------------------------------------------------------- foreign origin
@dataclass(frozen=True)
class Foreign:
    id: str
    body: Callable[[SlackBench, Any], str]  # (bench, the gate message waiting for a decision)
    why: str
    content_type: str = FORM


def foreign_click(**changes: Any) -> Callable[[SlackBench, Any], str]:
    def build(bench: SlackBench, gate: Any) -> str:
        payload = json.loads(dict(parse_qsl(bench.sender.click("U0APPROVER1", gate, APPROVE, _value(gate))))["payload"])
        for key, value in changes.items():
            if value is None:
                payload.pop(key, None)
            elif isinstance(value, dict) and isinstance(payload.get(key), dict):
                payload[key] = {**payload[key], **value}
            else:
                payload[key] = value
        return form(payload)
    return build


def _value(gate: Any) -> str:
    return str(next(e["value"] for b in gate.blocks for e in b.get("elements", []) if e.get("action_id") == APPROVE))


FOREIGN: list[Foreign] = [
    Foreign("click-from-another-app", foreign_click(api_app_id="A0OTHERAPP"), "comes from another app"),
    Foreign("click-from-another-workspace", foreign_click(team={"id": "T0OTHER"}), "comes from another workspace"),
    Foreign("click-by-a-slack-connect-guest", foreign_click(user={"team_id": "T0PARTNER"}), "comes from another workspace"),
    Foreign("click-from-another-organisation", foreign_click(enterprise={"id": "E0OTHER", "name": "Other"}),
            "comes from another organisation"),
    Foreign("click-naming-no-app", foreign_click(api_app_id=None), "names no app"),
    Foreign("command-from-another-workspace", lambda b, g: slash(b, "deploy rel-a", team_id="T0OTHER"),
            "comes from another workspace"),
    Foreign("command-from-another-app", lambda b, g: slash(b, "deploy rel-a", api_app_id="A0OTHERAPP"), "comes from another app"),
    Foreign("command-naming-no-app", lambda b, g: slash(b, "deploy rel-a", api_app_id=None), "names no app"),
    Foreign("command-from-another-organisation", lambda b, g: slash(b, "deploy rel-a", enterprise_id="E0OTHER"),
            "comes from another organisation"),
    Foreign("home-opened-in-another-workspace",
            lambda b, g: json.dumps({**json.loads(b.sender.home_opened("U0APPROVER1")), "team_id": "T0OTHER"}),
            "comes from another workspace", JSON),
]


def refusals(bench: SlackBench) -> list[dict[str, Any]]:
    with bench.app.ctx.uow() as uow:
        return [dict(a.details or {}, actor=a.actor) for a in uow.audit.list(limit=200) if a.action == "slack.request_refused"]


@pytest.mark.parametrize("case", FOREIGN, ids=lambda c: c.id)
def test_a_signed_request_from_another_app_workspace_or_organisation_runs_nothing_and_is_audited(
    bench: SlackBench, case: Foreign,
) -> None:
    bench.slash("U0DEPLOYER", "deploy rel-a to kimi-prod")
    gate = bench.gate_message("artifact", 1)
    assert bench.app.wait_idle(20)
    before = len(bench.stub.calls)
    body = case.body(bench, gate)
    answer = bench.post(body, bench.sender.headers(body, content_type=case.content_type), case.content_type)
    assert (answer.status_code, answer.text) == (200, "")
    assert bench.app.wait_idle(20)
    # Nobody answered, nothing decided or published. The deploy's own thread may still move meanwhile (its progress
    # message is edited a few seconds after the step it shows, and a busy machine delays that past the idle wait):
    # those edits and thread posts are the deploy's, not an answer to the foreign request.
    answered = [c.method for c in bench.stub.calls[before:] if not _the_deploys_own(c, gate)]
    assert answered == []
    assert has_buttons(gate)  # the gate still waits for someone of ours
    (refused,) = refusals(bench)
    assert refused["why"] == case.why


def _the_deploys_own(call: Any, gate: Any) -> bool:
    """A progress edit or thread post of the deploy itself (any edit of another message than the gate's)."""
    if call.method == "chat.update":
        return call.params.get("ts") != gate.ts
    return call.method == "chat.postMessage" and bool(call.params.get("thread_ts"))


def test_the_allowed_workspaces_setting_overrides_what_auth_test_says(make_ctx: Any) -> None:
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles={**ROLES, "viewer": ["U0DEPLOYER"]},
                   slack_allowed_team_ids=["T0SECOND"])
    bench = start_bench(ctx)
    try:
        assert bench.post(slash(bench, "help", team_id="T0SECOND")).status_code == 200
        assert bench.replies_to("requester")
        assert bench.post(slash(bench, "help")).text == ""  # the bot token's own workspace is no longer served
        assert refusals(bench)[0]["team"] == bench.sender.team
    finally:
        stop_bench(bench)


def test_the_organisation_setting_refuses_requests_from_any_other(make_ctx: Any) -> None:
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles={**ROLES, "viewer": ["U0DEPLOYER"]},
                   slack_enterprise_id="E0ORG")
    bench = start_bench(ctx)
    try:
        assert bench.post(slash(bench, "help", enterprise_id="E0ORG")).status_code == 200
        assert bench.replies_to("requester")
        assert bench.post(slash(bench, "help", enterprise_id="E0ELSEWHERE")).text == ""
        assert refusals(bench)[0]["why"] == "comes from another organisation"
    finally:
        stop_bench(bench)


def test_without_an_app_id_from_settings_or_auth_test_the_app_does_not_start(make_ctx: Any) -> None:
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES)
    with SlackStub(app_id="") as stub:
        ctx.settings.slack_api_url = stub.api_url
        with pytest.raises(ConfigError, match=r"^KIMI_SLACK_APP_ID: .*A0123ABCD"):
            create_app(build_root(ctx, slack_token="xoxb-test-token"), signing_secret="s", outbox_seconds=None)


TICKET_10_30 = json.dumps({"d": 10**30, "g": "artifact", "r": "x", "h": "y"})


def _answers(messages: list[Message]) -> list[Message]:
    """What the presser was told, but a "Checking …" said first while a slow decision was made (gate_actions.py)."""
    return [m for m in messages if (m.ephemeral_to or m.channel.startswith("U")) and not m.text.startswith("Checking ")]


@pytest.mark.parametrize(("action_id", "value", "answer"), [
    (APPROVE, TICKET_10_30, "no deployment #100000000000…"),
    (RECHECK, TICKET_10_30, "no deployment #"),
    (SHOW_CHECKS, TICKET_10_30, "no deployment #"),
    (REJECT, TICKET_10_30, "no deployment #"),
    (INCIDENT_ACK, str(10**30), "no incident #"),
    (ACCEPT_LIMITS, TICKET_10_30, "no deployment #"),
    (ACCEPT_AND_APPROVE, TICKET_10_30, "no deployment #"),
    (APPROVE_ABOVE_LIMITS, TICKET_10_30, "no deployment #"),
    (INCIDENT_SILENCE, str(10**30), "no incident #"),
    (INCIDENT_ROLLBACK, str(10**30), "no incident #"),
    (INCIDENT_SILENCE, "-1", "no incident #-1"),
    (INCIDENT_ROLLBACK, "1e400", "no longer says which incident"),
    (ACCEPT_AND_APPROVE, json.dumps({"d": -1, "g": "traffic", "r": "x", "h": "y"}), "no deployment #-1"),
    (ACCEPT_LIMITS, json.dumps({"d": "NaN", "g": "traffic", "r": "x", "h": "y"}), "damaged or outdated message"),
])
def test_a_button_naming_an_absurd_number_is_no_such_deployment_not_a_traceback(
    bench: SlackBench, action_id: str, value: str, answer: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """A forged or corrupted button naming deployment 10**30 (past any database integer) gets the ordinary answer."""
    body = click(bench, [{"action_id": action_id, "value": value}], user=user(bench, "U0APPROVER1"),
                 channel={"id": CHANNEL}, container={"channel_id": CHANNEL, "message_ts": "1.2"})
    with caplog.at_level("DEBUG"):
        assert bench.post(body).status_code == 200
        bench.stub.wait_for(lambda s: _answers(s.messages))
        assert bench.app.wait_idle(20)
    told = _answers(bench.stub.messages)
    assert len(told) == 1 and answer in told[0].text, [m.text for m in told]
    assert [r.getMessage() for r in caplog.records if r.exc_info] == [], "no traceback in the log"
