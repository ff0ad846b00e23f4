"""Malformed Slack requests, signed and sent over HTTP into the running app: one table, easy to extend.

Each row of :data:`MALFORMED` is a request Slack would never send us (or one we do not handle); the app must
acknowledge it with 200 (never 404 or 500, which Slack shows as "dispatch_failed"), run nothing, and — where a
person sent it — tell that person one line. A new finding is one more row. Requests from another app, workspace or
organisation: ``test_foreign_requests.py``.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest

from bot.adapters.slack.blocks import reject_modal
from bot.logs import BOLT_LOGGER
from bot.sandbox.slack_stub import sign
from bot.views.actions import (
    APPROVE,
)
from tests.slack_requests_support import FORM, JSON, click, form, ours, slash, started_bench, user
from tests.slack_requests_support import bench as bench
from tests.slack_support import CHANNEL, SlackBench, start_bench
from tests.workflow_support import ROLES, endpoint_config, fake_ports

# The Slack edge (or the CLI's wording) is what is tested here, not the store: SQLite only (tests/conftest.py).
pytestmark = pytest.mark.sqlite_only

QUIET = ("auth.test", "usergroups.users.list")  # made at start, or reading who is in which group: no answer


def submission(bench: SlackBench, *, view_changes: dict[str, Any], drop: tuple[str, ...] = ()) -> str:
    view = {**reject_modal('{"d":1,"g":"artifact","r":"x","h":"y"}', "artifact", 1, CHANNEL, "1.2"),
            "id": "V1", "team_id": bench.sender.team, "app_id": bench.sender.app,
            "state": {"values": {"reason": {"reason": {"type": "plain_text_input", "value": "broken weights"}}}}}
    view.update(view_changes)
    for key in drop:
        view.pop(key, None)
    return form(ours(bench, type="view_submission", user=user(bench, "U0APPROVER1"), view=view, response_urls=[]))


EVENT_IDS = itertools.count(1)


def event(bench: SlackBench, inner: Any) -> str:
    """An Events API delivery; each its own ``event_id``, as Slack gives them (the app takes one delivery of each)."""
    return json.dumps({"token": "unused", "team_id": bench.sender.team, "api_app_id": bench.sender.app,
                       "type": "event_callback", "event_id": f"Ev{next(EVENT_IDS)}", "event_time": int(time.time()),
                       "event": inner})


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


def caused(bench: SlackBench, since: int = 0) -> list[str]:
    """The Web API calls and response_url posts the requests caused (from call ``since`` on), once the app is idle."""
    assert bench.app.wait_idle(20)
    return [c.method for c in bench.stub.calls[since:] if c.method not in QUIET]


@pytest.fixture(scope="module")
def shared_bench(make_module_ctx: Any) -> Iterator[SlackBench]:
    """One bench for the table: each row runs nothing or tells one person one line, and leaves the app idle."""
    with started_bench(make_module_ctx) as b:
        yield b


@pytest.mark.parametrize("case", MALFORMED, ids=lambda c: c.id)
def test_malformed_input_is_acknowledged_and_its_sender_told_in_one_line(shared_bench: SlackBench, case: Case) -> None:
    bench = shared_bench
    calls, shown = len(bench.stub.calls), len(bench.stub.messages)  # what the rows before this one caused
    body = case.body(bench)
    # How fast it is acknowledged is measured in bench/ack_latency.py, beside a bare Bolt app, not asserted here.
    answer = bench.post(body, bench.sender.headers(body, content_type=case.content_type), case.content_type)
    assert answer.status_code == case.status, answer.text
    assert case.ack in answer.text
    assert "\n" not in answer.text  # one line, never a traceback
    if case.told is None:
        assert caused(bench, calls) == [], "nothing may run and nobody is told"
        return
    told = bench.stub.wait_for(lambda s: [m for m in s.messages[shown:] if m.ephemeral_to or m.channel.startswith("U")])
    assert len(told) == 1 and case.told in told[0].text, [m.text for m in told]
    assert caused(bench, calls) in (["response_url"], ["chat.postMessage"], ["chat.postEphemeral"])


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
    with start_bench(ctx) as b:
        yield b


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
