"""Hostile and malformed Slack requests, signed and sent over HTTP into the running app: one table, easy to extend.

Each row of :data:`MALFORMED` is a request Slack would never send us (or one we
do not handle); the app must acknowledge it with 200 (never 404 or 500, which
Slack shows as "dispatch_failed"), run nothing, and — where a person sent it —
tell that person one line. Each row of :data:`FOREIGN` is a correctly signed
request from another app, workspace or organisation: acknowledged with 200,
nothing run, nobody told, one audit row. A new finding is one more row.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from bot.adapters.slack.blocks import reject_modal
from bot.bootstrap import build_root
from bot.config import ConfigError
from bot.logs import BOLT_LOGGER
from bot.sandbox.slack_stub import SlackStub, sign
from bot.services.releases import register_release
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
from tests.slack_support import CHANNEL, SlackBench, has_buttons, start_bench, stop_bench
from tests.workflow_support import ROLES, endpoint_config, fake_ports, release_data

# The Slack edge (or the CLI's wording) is what is tested here, not the store: SQLite only (tests/conftest.py).
pytestmark = pytest.mark.sqlite_only

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"
QUIET = ("auth.test", "usergroups.users.list")  # made at start, or reading who is in which group: no answer


# ---------------------------------------------------------------------------------------------- building bodies
def form(payload: Any) -> str:
    return urlencode({"payload": json.dumps(payload)})


def slash(bench: SlackBench, text: str = "help", **changes: str | None) -> str:
    """A slash command as the sender builds it, with fields changed (``None`` drops one)."""
    fields = dict(parse_qsl(bench.sender.slash("U0DEPLOYER", "", CHANNEL), keep_blank_values=True))
    fields["text"] = text
    for key, value in changes.items():
        if value is None:
            fields.pop(key, None)
        else:
            fields[key] = value
    return urlencode(fields)


def ours(bench: SlackBench, **fields: Any) -> dict[str, Any]:
    """An interactivity payload naming our app and workspace, plus ``fields``."""
    return {"api_app_id": bench.sender.app, "team": {"id": bench.sender.team, "domain": "sandbox"},
            "token": "unused", "trigger_id": "1.2.trigger", **fields}


def user(bench: SlackBench, who: str = "U0DEPLOYER") -> dict[str, str]:
    return {"id": who, "username": who.lower(), "team_id": bench.sender.team}


def submission(bench: SlackBench, *, view_changes: dict[str, Any], drop: tuple[str, ...] = ()) -> str:
    view = {**reject_modal('{"d":1,"g":"artifact","r":"x","h":"y"}', "artifact", 1, CHANNEL, "1.2"),
            "id": "V1", "team_id": bench.sender.team, "app_id": bench.sender.app,
            "state": {"values": {"reason": {"reason": {"type": "plain_text_input", "value": "broken weights"}}}}}
    view.update(view_changes)
    for key in drop:
        view.pop(key, None)
    return form(ours(bench, type="view_submission", user=user(bench, "U0APPROVER1"), view=view, response_urls=[]))


def event(bench: SlackBench, inner: Any) -> str:
    return json.dumps({"token": "unused", "team_id": bench.sender.team, "api_app_id": bench.sender.app,
                       "type": "event_callback", "event_id": "Ev1", "event_time": int(time.time()), "event": inner})


def click(bench: SlackBench, actions: Any, **fields: Any) -> str:
    payload = ours(bench, type="block_actions", user=user(bench), actions=actions, response_url=bench.stub.response_url("act"))
    return form({**payload, **fields})


# ---------------------------------------------------------------------------------------------- malformed input
@dataclass(frozen=True)
class Case:
    id: str
    body: Callable[[SlackBench], str]
    content_type: str = FORM
    ack: str = ""  # what the acknowledgement's body must contain ("" : anything, usually empty)
    told: str | None = None  # what the sender is told afterwards, in one line (None: nobody is told)
    status: int = 200


MALFORMED: list[Case] = [
    Case("payload-not-json", lambda b: "payload=%7Bnot+json"),
    Case("payload-empty-list", lambda b: "payload=%5B%5D"),
    Case("payload-null", lambda b: "payload=null"),
    Case("payload-number", lambda b: "payload=5"),
    Case("json-body-list", lambda b: "[]", JSON),
    Case("json-body-null", lambda b: "null", JSON),
    Case("json-body-not-json", lambda b: "{oops", JSON),
    Case("team-is-a-string", lambda b: form({**ours(b, type="block_actions", user=user(b), actions=[]), "team": "T0SANDBOX"}),
         told="actions.0.action_id missing"),  # no channel nor response URL: told in a DM
    Case("empty-form", lambda b: ""),
    Case("form-without-payload", lambda b: urlencode({"api_app_id": b.sender.app, "team_id": b.sender.team})),
    Case("unknown-payload-type", lambda b: form(ours(b, type="frobnicate", user=user(b)))),
    Case("legacy-dialog-submission", lambda b: form(ours(b, type="dialog_submission", user=user(b), callback_id="x"))),
    Case("view-submission-without-state", lambda b: submission(b, view_changes={}, drop=("state",)),
         ack='"Say why the gate is rejected."'),
    Case("view-submission-state-values-a-list", lambda b: submission(b, view_changes={"state": {"values": []}}),
         ack='"Say why the gate is rejected."'),
    Case("view-submission-broken-private-metadata", lambda b: submission(b, view_changes={"private_metadata": "{not json"}),
         ack="no longer says which gate it rejects"),
    Case("view-submission-metadata-a-list", lambda b: submission(b, view_changes={"private_metadata": "[1, 2]"}),
         ack="no longer says which gate it rejects"),
    Case("view-submission-without-view", lambda b: form(ours(b, type="view_submission", user=user(b))),
         told="view.callback_id missing"),
    Case("view-submission-unknown-form", lambda b: submission(b, view_changes={"callback_id": "someone_elses_form"}),
         ack='"response_action": "update"'),
    Case("history-with-5000-digits", lambda b: slash(b, "history kimi-prod " + "9" * 5000), ack="5,018 characters long"),
    Case("history-with-1900-digits", lambda b: slash(b, "history kimi-prod " + "9" * 1900), ack="Usage: `/kimi history"),
    Case("history-page-with-1900-digits", lambda b: slash(b, "history kimi-prod --page " + "9" * 1900),
         ack="Usage: `/kimi history"),
    Case("history-with-superscript-digit", lambda b: slash(b, "history kimi-prod \u00b2"), ack="Usage: `/kimi history"),
    Case("cancel-with-1990-digits", lambda b: slash(b, "cancel " + "7" * 1990), ack="Usage: `/kimi cancel"),
    Case("capacity-of-an-unknown-endpoint", lambda b: slash(b, "capacity kimi-nowhere"), told="no endpoint named kimi-nowhere"),
    Case("capacity-of-two-endpoints", lambda b: slash(b, "capacity kimi-prod kimi-other"), ack="(one endpoint)"),
    Case("capacity-without-an-endpoint", lambda b: slash(b, "capacity"), ack="name the endpoint"),
    Case("capacity-of-an-endpoint-with-NUL", lambda b: slash(b, "capacity kimi-prod\x00"), told="no endpoint named kimi-prod"),
    Case("approve-with-an-absurd-number", lambda b: slash(b, "approve " + str(10**30)),
         ack="a gate is approved with the buttons"),
    Case("approve-with-1990-digits", lambda b: slash(b, "approve " + "9" * 1990), ack="a gate is approved with the buttons"),
    Case("reject-with-a-negative-number", lambda b: slash(b, "reject -5 model"), ack="a gate is rejected with the buttons"),
    Case("status-of-an-unknown-endpoint", lambda b: slash(b, "status kimi-nowhere"), told="no endpoint named kimi-nowhere"),
    Case("status-of-a-200-character-endpoint", lambda b: slash(b, "status " + "k" * 200), told="no endpoint named kkk"),
    Case("slo-of-an-unknown-endpoint", lambda b: slash(b, "slo kimi-nowhere"), told="no endpoint named kimi-nowhere"),
    Case("reservations-of-an-unknown-endpoint", lambda b: slash(b, "reservations kimi-nowhere"),
         ack="`kimi-nowhere` is more than this command takes"),
    Case("deploy-to-an-unknown-endpoint", lambda b: slash(b, "deploy rel-a kimi-nowhere"), ack="say `to` before"),
    Case("history-of-an-endpoint-with-NUL", lambda b: slash(b, "history kimi-prod\x00"), told="did you mean `kimi-prod`?"),
    Case("unbalanced-quotes", lambda b: slash(b, 'deploy "rel-a'), ack="a quote is opened and never closed"),
    Case("command-over-the-length-limit", lambda b: slash(b, "deploy " + "x" * 1994), ack="2,001 characters long"),
    Case("command-200k-characters", lambda b: slash(b, "x" * 200_000), ack="200,000 characters long"),
    Case("command-without-user", lambda b: slash(b, "help", user_id=None), ack="user_id missing"),
    Case("another-slash-command", lambda b: slash(b, "help", command="/weather"), ack="does not handle `/weather`"),
    Case("click-without-actions", lambda b: click(b, []), told="incomplete request (actions.0.action_id missing)"),
    Case("click-actions-not-a-list", lambda b: click(b, "approve"), told="actions.0.action_id missing"),
    Case("click-channel-is-a-string", lambda b: click(b, [{"action_id": APPROVE, "value": "{}"}], channel="C1"),
         told="damaged or outdated message"),
    Case("click-on-a-button-we-do-not-know", lambda b: click(b, [{"action_id": "old_button", "value": "v"}]),
         told="does not know the button `old_button`"),
    Case("approve-with-a-garbage-ticket",
         lambda b: click(b, [{"action_id": APPROVE, "value": "{garbage"}], user=user(b, "U0APPROVER1")),
         told=""),
    Case("unknown-global-shortcut", lambda b: form(ours(b, type="shortcut", user=user(b), callback_id="make_coffee")),
         told="no shortcut `make_coffee`"),
    Case("unknown-message-shortcut", lambda b: form(ours(b, type="message_action", user=user(b), callback_id="summarise",
                                                         channel={"id": CHANNEL}, message={"ts": "1.2", "text": "hi"},
                                                         response_url=b.stub.response_url("shortcut"))),
         told="no shortcut `summarise`"),
    Case("unknown-event-type", lambda b: event(b, {"type": "reaction_added", "user": "U0DEPLOYER"}), JSON),
    Case("event-without-type", lambda b: event(b, {"user": "U0DEPLOYER"}), JSON),
    Case("event-is-a-string", lambda b: event(b, "app_home_opened"), JSON),
    Case("home-opened-without-user", lambda b: event(b, {"type": "app_home_opened", "tab": "home"}), JSON),
    Case("options-request", lambda b: form(ours(b, type="block_suggestion", user=user(b), action_id="pick", value="k"))),
    Case("view-closed", lambda b: form(ours(b, type="view_closed", user=user(b), view={"callback_id": "x", "id": "V2"}))),
]


@pytest.fixture()
def bench(make_ctx: Any) -> Iterator[SlackBench]:
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    b = start_bench(ctx)
    yield b
    stop_bench(b)


def caused(bench: SlackBench) -> list[str]:
    """The Web API calls and response_url posts the requests caused, once the app is idle."""
    assert bench.app.wait_idle(20)
    return [c.method for c in bench.stub.calls if c.method not in QUIET]


@pytest.mark.parametrize("case", MALFORMED, ids=lambda c: c.id)
def test_malformed_input_is_acknowledged_and_its_sender_told_in_one_line(bench: SlackBench, case: Case) -> None:
    body = case.body(bench)
    # How fast it is acknowledged is measured in bench/ack_latency.py, beside a bare Bolt app, not asserted here.
    answer = bench.post(body, bench.sender.headers(body, content_type=case.content_type), case.content_type)
    assert answer.status_code == case.status, answer.text
    assert case.ack in answer.text
    assert "\n" not in answer.text  # one line, never a traceback
    if case.told is None:
        assert caused(bench) == [], "nothing may run and nobody is told"
        return
    told = bench.stub.wait_for(lambda s: [m for m in s.messages if m.ephemeral_to or m.channel.startswith("U")])
    assert len(told) == 1 and case.told in told[0].text, [m.text for m in told]
    assert caused(bench) in (["response_url"], ["chat.postMessage"], ["chat.postEphemeral"])


def test_an_invalid_utf8_body_is_refused_not_a_500(bench: SlackBench) -> None:
    raw = b"payload=%7B%22type%22%3A%22block_actions%22%7D\xff\xfe"
    now = str(int(time.time()))
    headers = {"content-type": FORM, "x-slack-request-timestamp": now,
               "x-slack-signature": sign(bench.sender.secret, now, raw.decode("latin-1"))}
    answer = bench.client.post(f"{bench.http.url}/slack/events", content=raw, headers=headers)
    assert answer.status_code == 401
    assert caused(bench) == []


def test_a_forged_malformed_body_is_still_401(bench: SlackBench) -> None:
    body = "payload=%7Bnot+json"
    now = str(int(time.time()))
    forged = {"content-type": FORM, "x-slack-request-timestamp": now, "x-slack-signature": sign("not-the-secret", now, body)}
    assert bench.post(body, forged).status_code == 401


@pytest.fixture()
def logged_bench(make_ctx: Any, caplog: pytest.LogCaptureFixture) -> Iterator[SlackBench]:
    """The bench, started with the log at INFO as ``serve`` runs (Bolt takes its loggers' level when the app is made)."""
    caplog.set_level("INFO")
    caplog.set_level("INFO", logger=BOLT_LOGGER)  # an app made earlier in this process may have left it higher
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES, ports=fake_ports())
    b = start_bench(ctx)
    yield b
    stop_bench(b)


@pytest.mark.parametrize("refusal", ["forged signature", "stale timestamp", "no signature"])
def test_a_request_refused_for_its_signature_or_timestamp_is_logged_without_its_body(
    logged_bench: SlackBench, refusal: str, caplog: pytest.LogCaptureFixture,
) -> None:
    bench = logged_bench
    body = slash(bench, "deploy rel-a to kimi-prod because TYPED-BY-SOMEONE-ELSE")
    now, stale = str(int(time.time())), str(int(time.time()) - 3600)
    headers = {
        "forged signature": {"x-slack-request-timestamp": now, "x-slack-signature": sign("not-the-secret", now, body)},
        "stale timestamp": {"x-slack-request-timestamp": stale, "x-slack-signature": sign(bench.sender.secret, stale, body)},
        "no signature": {"x-slack-request-timestamp": now},
    }[refusal]
    assert bench.post(body, {"content-type": FORM, **headers}).status_code == 401
    logged = [r.getMessage() for r in caplog.records]
    assert any("refused a Slack request" in m and f"body of {len(body)} characters not logged" in m for m in logged), logged
    assert not [m for m in logged if "TYPED-BY-SOMEONE-ELSE" in m or "rel-a" in m], "the refused body is in the log"
    assert caused(bench) == []


@pytest.mark.parametrize("text", ["history kimi-prod " + "9" * 5000, "history " + "9" * 5000 + " --page 2",
                                  "cancel " + "7" * 5000, "gates --page " + "1" * 5000])
def test_thousands_of_digits_are_a_usage_line_even_past_the_length_limit(text: str) -> None:
    from commands.base import Usage
    from commands.registry import parse

    with pytest.raises(Usage):
        parse(text)


def test_a_command_at_the_length_limit_is_still_read(bench: SlackBench) -> None:
    answer = bench.post(slash(bench, "deploy " + "x" * 1993))
    assert answer.status_code == 200 and "characters long" not in answer.text


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
        told = bench.stub.wait_for(lambda s: [m for m in s.messages if m.ephemeral_to or m.channel.startswith("U")])
        assert bench.app.wait_idle(20)
    assert len(told) == 1 and answer in told[0].text, [m.text for m in told]
    assert [r.getMessage() for r in caplog.records if r.exc_info] == [], "no traceback in the log"
