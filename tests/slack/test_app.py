"""The Slack app over real HTTP: signatures, commands, buttons, the modal, App Home, metrics — as a person sees them."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

import pytest

from bot.sandbox.slack_stub import sign
from bot.services.context import Ports
from bot.services.releases import register_release
from bot.views.actions import APPROVE, REJECT, SHOW_CHECKS
from tests.slack_support import (
    CHANNEL,
    blocks_text,
    has_buttons,
    start_bench,
)
from tests.workflow_support import ROLES, endpoint_config, fake_ports, release_data

# The Slack edge (or the CLI's wording) is what is tested here, not the store: SQLite only (tests/conftest.py).
pytestmark = pytest.mark.sqlite_only

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "protocol-samples" / "slack"


@pytest.fixture()
def bench(make_ctx):
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles={**ROLES, "viewer": ["S0VIEWERS"]}, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    register_release(ctx, release_data("rel-b", EXTRA="1"), "U0DEPLOYER")
    with start_bench(ctx, groups={"S0APPROVERS": ["U0APPROVER2"], "S0VIEWERS": ["U0VIEWER"]}) as b:
        yield b


def test_signing_helper_reproduces_slacks_published_vector() -> None:
    vector = json.loads((SAMPLES / "slack_signing_vector.json").read_text())
    assert sign(vector["signing_secret"], vector["x_slack_request_timestamp"], vector["raw_body"]) == vector["x_slack_signature"]


def test_forged_stale_and_replayed_requests_get_401_and_do_nothing(bench) -> None:
    form = dict(parse_qsl((SAMPLES / "slack_slash_command_body_bolt_python.txt").read_text()))
    form.update(command="/kimi", text="help", response_url=bench.stub.response_url("sample"))
    # Slack's sample comes from its own workspace and organisation and names no app: make it ours, or it is refused.
    form.update(team_id=bench.sender.team, api_app_id=bench.sender.app)
    form.pop("enterprise_id", None)
    body = urlencode(form)
    now = int(time.time())
    forged = {"content-type": "application/x-www-form-urlencoded", "x-slack-request-timestamp": str(now),
              "x-slack-signature": sign("not-the-secret", str(now), body)}
    assert bench.post(body, forged).status_code == 401
    stale = bench.sender.headers(body, timestamp=now - 600)
    assert bench.post(body, stale).status_code == 401
    good = bench.sender.headers(body)
    tampered = urlencode({**form, "text": "deploy rel-a"})
    assert bench.post(tampered, good).status_code == 401  # a signed header replayed on another body
    assert bench.post(body, good).status_code == 200
    assert bench.post(body, good).status_code == 401  # the very same signed request again
    calls = bench.stub.wait_for(lambda s: s.calls_to("response_url"))
    time.sleep(0.2)
    assert len(bench.stub.calls_to("response_url")) == len(calls) == 1


def test_unknown_or_malformed_input_gets_the_usage_line_in_the_ack(bench) -> None:
    answer = bench.slash("U0DEPLOYER", "deploy")
    assert answer.status_code == 200 and "Usage: `/kimi deploy RELEASE [to ENDPOINT]`" in answer.text
    answer = bench.slash("U0DEPLOYER", "frobnicate now")
    assert "there is no sub-command `frobnicate`" in answer.text
    answer = bench.slash("U0DEPLOYER", "history kimi-prod many")
    assert "/kimi history [ENDPOINT] [N]" in answer.text


def test_help_lists_every_sub_command_from_the_modules(bench) -> None:
    from commands.registry import COMMANDS

    assert bench.slash("U0VIEWER", "help").status_code == 200
    reply = bench.replies_to("requester")[0]
    for module in COMMANDS:
        assert module.USAGE in blocks_text(reply.blocks)


def test_release_list_and_diff_for_a_group_member(bench) -> None:
    bench.slash("U0VIEWER", "release list")
    listing = blocks_text(bench.replies_to("requester")[0].blocks)
    assert "rel-a" in listing and "rel-b" in listing
    bench.slash("U0VIEWER", "diff rel-a rel-b")
    diff = blocks_text(bench.replies_to("requester", 2)[1].blocks)
    assert "EXTRA" in diff


def test_someone_without_a_role_is_refused_in_one_sentence(bench) -> None:
    bench.slash("U0NOBODY", "deploy rel-a")
    text = bench.replies_to("requester")[0].text
    assert text.startswith("you need the deployer role")
    assert "Traceback" not in text


def test_deploy_opens_a_thread_with_a_gate_message_and_buttons(bench) -> None:
    assert bench.slash("U0DEPLOYER", "deploy rel-a to kimi-prod").status_code == 200
    ack = bench.replies_to("requester")[0]
    assert "Deployment #1" in ack.text
    gate = bench.gate_message("artifact", 1)
    assert gate.channel == CHANNEL and gate.thread_ts is not None and has_buttons(gate)
    root = next(m for m in bench.stub.messages if m.ts == gate.thread_ts)
    assert "Deployment #1: deploy of *rel-a* to *kimi-prod*" in root.text
    shown = blocks_text(gate.blocks)
    assert "*image.pinned* (pass)" not in shown and "1 check passed" in shown  # passing checks are counted, not listed
    # The approvers are told once, in the message; the requester reads who may decide.
    assert "Waiting for someone with the approver role to approve or reject. <@U0DEPLOYER>: they can decide" in shown
    assert bench.click("U0VIEWER", gate, SHOW_CHECKS).status_code == 200
    assert "*image.pinned* (pass)" in blocks_text(bench.replies_to("U0VIEWER")[0].blocks)  # to the clicker alone


def test_approve_updates_the_message_in_place_and_a_double_click_is_refused(bench) -> None:
    bench.slash("U0DEPLOYER", "deploy rel-a")
    gate = bench.gate_message("artifact", 1)
    as_seen_before = copy.deepcopy(gate)  # a second client still shows the buttons
    assert bench.click("U0APPROVER1", gate, APPROVE).status_code == 200
    bench.stub.wait_for(lambda s: not has_buttons(gate) and "Approved by <@U0APPROVER1>" in blocks_text(gate.blocks))
    bench.gate_message("infrastructure", 1)
    # The press was decided before the message changed: its first edit already says who approved, without buttons.
    first = next(c for c in bench.stub.calls_to("chat.update") if c.params["ts"] == gate.ts)
    assert "Approved by <@U0APPROVER1>" in blocks_text(first.params["blocks"])
    assert not [b for b in first.params["blocks"] if b["type"] == "actions"]
    said = bench.replies_to("U0APPROVER1")[0].text
    assert "You approved the artifact gate of deployment #1; next: the infrastructure gate's checks" in said
    assert bench.click("U0APPROVER2", as_seen_before, APPROVE).status_code == 200  # the old message, clicked
    refusal = bench.replies_to("U0APPROVER2")[0].text
    assert "is not waiting for a decision" in refusal


def test_self_approval_and_strangers_are_refused_with_an_audit_row(bench) -> None:
    bench.slash("U0ADMIN", "deploy rel-a")
    gate = bench.gate_message("artifact", 1)
    bench.click("U0ADMIN", gate, APPROVE)
    assert "you requested deployment #1; someone else must approve" in bench.replies_to("U0ADMIN")[0].text
    bench.click("U0STRANGER", gate, APPROVE)
    assert "you need the approver role" in bench.replies_to("U0STRANGER")[0].text
    # Refused presses never showed on the shared message: no approval that did not happen, not even for a moment.
    assert not [c for c in bench.stub.calls_to("chat.update") if c.params["ts"] == gate.ts]
    with bench.app.ctx.uow() as uow:
        refused = {(a.actor, a.action) for a in uow.audit.list(limit=50)}
    assert {("U0ADMIN", "gate.decision_refused"), ("U0STRANGER", "access.refused")} <= refused
    assert has_buttons(gate)


def test_reject_asks_for_a_reason_in_a_modal_and_ends_the_deployment(bench) -> None:
    bench.slash("U0DEPLOYER", "deploy rel-a")
    gate = bench.gate_message("artifact", 1)
    bench.click("U0APPROVER2", gate, REJECT)
    opened = bench.stub.wait_for(lambda s: s.calls_to("views.open"))[0]
    view = opened.params["view"]
    assert view["title"]["text"] == "Reject gate"
    empty = bench.post(bench.sender.submit("U0APPROVER2", view, {"reason": {"reason": "  "}}))
    assert empty.json()["response_action"] == "errors"
    bench.post(bench.sender.submit("U0APPROVER2", view, {"reason": {"reason": "weights bucket is wrong"}}))
    bench.stub.wait_for(lambda s: "Rejected by <@U0APPROVER2>" in blocks_text(gate.blocks) and not has_buttons(gate))
    assert "weights bucket is wrong" in blocks_text(gate.blocks)
    assert "rejected the artifact gate" in bench.replies_to("U0APPROVER2")[0].text


def redelivery(bench, body: str, number: int) -> dict[str, str]:
    """Slack's headers on its ``number``-th redelivery of ``body``: re-signed with a fresh timestamp, same body."""
    return {**bench.sender.headers(body, timestamp=int(time.time()) + number),
            "x-slack-retry-num": str(number), "x-slack-retry-reason": "http_timeout"}


def answers(bench) -> int:
    time.sleep(0.3)  # a second answer would be posted by now
    return len(bench.stub.calls_to("response_url"))


def test_a_redelivery_of_a_request_already_handled_is_acknowledged_and_dropped(bench) -> None:
    body = bench.sender.slash("U0VIEWER", "help")
    assert bench.post(body).status_code == 200
    bench.stub.wait_for(lambda s: s.calls_to("response_url"))
    assert bench.post(body, redelivery(bench, body, 1)).status_code == 200  # acknowledged, so Slack stops
    assert answers(bench) == 1


def test_a_redelivery_whose_original_never_arrived_is_handled_once(bench) -> None:
    body = bench.sender.slash("U0VIEWER", "help")  # the original is lost on the way: only redeliveries arrive
    assert bench.post(body, redelivery(bench, body, 1)).status_code == 200
    bench.stub.wait_for(lambda s: s.calls_to("response_url"))
    assert bench.post(body, redelivery(bench, body, 2)).status_code == 200
    assert answers(bench) == 1


def test_app_home_shows_each_endpoint_and_is_refreshed_on_change(bench) -> None:
    assert bench.home("U0VIEWER").status_code == 200
    first = bench.stub.wait_for(lambda s: s.calls_to("views.publish"))[0]
    text = blocks_text(first.params["view"]["blocks"])
    assert "kimi-prod" in text and "live release:* none" in text and "in flight:* nothing" in text
    bench.slash("U0DEPLOYER", "deploy rel-a")
    bench.gate_message("artifact", 1)
    refreshed = bench.stub.wait_for(lambda s: [c for c in s.calls_to("views.publish")
                                               if "pending gate:* artifact" in blocks_text(c.params["view"]["blocks"])])
    assert refreshed[-1].params["user_id"] == "U0VIEWER"
    bench.home("U0STRANGER")
    theirs = bench.stub.wait_for(lambda s: [c for c in s.calls_to("views.publish") if c.params["user_id"] == "U0STRANGER"])
    assert "You need the viewer role" in blocks_text(theirs[-1].params["view"]["blocks"])


def test_app_home_follows_a_probe_run_by_another_replica(bench, make_ctx) -> None:
    from bot.services.readiness import probe_endpoints
    from tests.jobs_support import ScriptedEndpoint, make_live

    make_live(bench.app.ctx, "kimi-prod")
    assert bench.home("U0VIEWER").status_code == 200
    bench.stub.wait_for(lambda s: [c for c in s.calls_to("views.publish")
                                   if "never probed" in blocks_text(c.params["view"]["blocks"])])
    # The elected replica runs the probe: it shares the database, not this process, and a passing probe emits no event.
    other = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles={**ROLES, "viewer": ["S0VIEWERS"]},
                     ports=Ports(endpoint=ScriptedEndpoint()))
    probe_endpoints(other)
    refreshed = bench.stub.wait_for(lambda s: [c for c in s.calls_to("views.publish")
                                               if "answered: first token 180 ms" in blocks_text(c.params["view"]["blocks"])])
    assert refreshed[-1].params["user_id"] == "U0VIEWER"


def test_unexpected_errors_show_a_correlation_id_that_is_in_the_log(bench, caplog) -> None:
    with bench.app.ctx.uow() as uow:  # a stored endpoint no current code can read: a bug, not a user error
        row = uow.endpoints.get("kimi-prod")
        row.settings = {**row.settings, "exploded_field_with_secret": "xoxb-leak"}
        uow.commit()
    with caplog.at_level("ERROR"):
        bench.slash("U0VIEWER", "history kimi-prod")
        text = bench.replies_to("requester")[0].text
    assert "correlation id" in text and "exploded" not in text and "xoxb" not in text and "Traceback" not in text
    correlation = text.split("`")[1]
    assert any(getattr(r, "correlation_id", None) == correlation for r in caplog.records)


def test_healthz_and_metrics_count_requests(bench) -> None:
    assert bench.client.get(f"{bench.http.url}/healthz").text == "ok\n"
    bench.slash("U0VIEWER", "help")
    metrics = bench.client.get(f"{bench.http.url}/metrics").text
    assert 'kimi_slack_requests_total{kind="command",status="200"} 1.0' in metrics
    assert 'kimi_slack_ack_seconds_count{kind="command"} 1.0' in metrics


def test_readyz_needs_the_current_schema_while_healthz_only_needs_the_process(bench, db_url) -> None:
    from bot.adapters.store import schema

    ready = bench.client.get(f"{bench.http.url}/readyz")
    assert (ready.status_code, ready.text) == (200, "ready\n")
    schema.downgrade(db_url, "0002")  # another version's migration job ran against this database
    try:
        behind = bench.client.get(f"{bench.http.url}/readyz")
        assert behind.status_code == 503 and "schema is at 0002" in behind.text and "kimi-ops db upgrade" in behind.text
        assert bench.client.get(f"{bench.http.url}/healthz").status_code == 200
    finally:
        schema.upgrade(db_url)
    assert bench.client.get(f"{bench.http.url}/readyz").status_code == 200


def test_the_request_builder_speaks_the_shapes_of_slacks_own_samples(bench) -> None:
    from urllib.parse import parse_qs

    from bot.sandbox.slack_stub import Message

    slash_body = (SAMPLES / "slack_slash_command_body_docs_vector.txt").read_text()
    slash_sample = set(dict(parse_qsl(slash_body, keep_blank_values=True)))
    assert slash_sample <= set(parse_qs(bench.sender.slash("U1", "help"), keep_blank_values=True))
    click_sample = json.loads((SAMPLES / "slack_block_actions_bolt_python.json").read_text())
    click = json.loads(parse_qs(bench.sender.click("U1", Message("C1", "1.2", "t", []), APPROVE, "v"))["payload"][0])
    assert set(click_sample) <= set(click) and set(click_sample["actions"][0]) <= set(click["actions"][0])
    submit_sample = json.loads((SAMPLES / "slack_view_submission_bolt_python.json").read_text())
    submit = json.loads(parse_qs(bench.sender.submit("U1", {"callback_id": "x", "private_metadata": ""},
                                                     {"reason": {"reason": "r"}}))["payload"][0])
    assert set(submit_sample) <= set(submit)
    assert submit["view"]["state"]["values"]["reason"]["reason"]["value"] == "r"


def test_a_watch_alert_has_acknowledge_silence_and_roll_back_buttons(bench) -> None:
    from bot.services.incidents import Incidents
    from bot.views.actions import INCIDENT_ACK, INCIDENT_ROLLBACK, INCIDENT_SILENCE
    from tests.jobs_support import make_live

    ctx = bench.app.root.ctx
    make_live(ctx, "kimi-prod", "rel-b")
    with ctx.uow() as uow:
        row = uow.endpoints.get("kimi-prod")
        Incidents(ctx, uow, row, ctx.settings.endpoint("kimi-prod"), ctx.clock.now(), {}).open(
            "node", "page", "node hyperpod-i-0 is not Ready (False)")
        uow.commit()
    alert = bench.stub.wait_for(lambda s: next((m for m in s.messages if "is not Ready" in blocks_text(m.blocks)
                                                and m.ephemeral_to is None), None))
    assert "live: *rel-b*" in blocks_text(alert.blocks) and "last deployment #" in blocks_text(alert.blocks)
    bench.click("U0DEPLOYER", alert, INCIDENT_ACK)
    bench.stub.wait_for(lambda s: "acknowledged by <@U0DEPLOYER>" in blocks_text(alert.blocks))

    bench.click("U0DEPLOYER", alert, INCIDENT_SILENCE)
    view = bench.stub.wait_for(lambda s: s.calls_to("views.open"))[0].params["view"]
    assert bench.post(bench.sender.submit("U0DEPLOYER", view, {"reason": {"reason": " "}, "hours": {"hours": "4"}})
                      ).json()["response_action"] == "errors"
    bench.post(bench.sender.submit("U0DEPLOYER", view, {"reason": {"reason": "AWS replaces the node"},
                                                        "hours": {"hours": "4"}}))
    bench.stub.wait_for(lambda s: "silenced by <@U0DEPLOYER>" in blocks_text(alert.blocks))
    assert "AWS replaces the node" in blocks_text(alert.blocks)
    with ctx.uow() as uow:
        actions = [a.action for a in uow.audit.list(subject="endpoint:kimi-prod")]
    assert "incident.acknowledged" in actions and "incident.silenced" in actions

    bench.click("U0VIEWER", alert, INCIDENT_ROLLBACK)  # the rollback's own rules: a viewer may not roll back
    assert "role" in bench.replies_to("U0VIEWER")[0].text
