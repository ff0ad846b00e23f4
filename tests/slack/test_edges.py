"""Edges of the Slack front end that a person runs into: usage lines, refusals, which gate a button decides, who decided when.

Signed requests over HTTP into the running app; what people see is read from the Web API stub.
"""

from __future__ import annotations

import re
import threading

import pytest

from bot.services.releases import register_release
from bot.views.actions import APPROVE, REJECT
from commands.registry import COMMANDS
from tests.slack_support import (
    CHANNEL,
    blocks_text,
    has_buttons,
    start_bench,
)
from tests.workflow_support import ROLES, endpoint_config, fake_ports, release_data

# The Slack edge (or the CLI's wording) is what is tested here, not the store: SQLite only (tests/conftest.py).
pytestmark = pytest.mark.sqlite_only

# One malformed line per sub-command; a new sub-command needs its own here (the test below checks).
MALFORMED = {
    "help": "help me", "deploy": "deploy", "status": "status a b", "history": "history a 0", "release": "release",
    "diff": "diff rel-a", "gates": "gates now", "rollback": "rollback a b c d", "cancel": "cancel twelve",
    "reservations": "reservations all", "drain": "drain later 3", "admission": "admission maybe kimi-prod",
    "slo": "slo a b", "licence": "licence a b", "exceptions": "exceptions none", "exception": "exception add SEC-1 kind=root",
    "ramp": "ramp later 3 50%", "drill": "drill kimi-prod chaos", "drills": "drills kimi-prod many",
    "capacity": "capacity kimi-prod kimi-staging",
}


@pytest.fixture()
def bench(make_ctx):
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL), endpoint_config("kimi-staging", channel=CHANNEL)],
                   roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    with start_bench(ctx, groups={"S0APPROVERS": ["U0APPROVER2"]}) as b:
        yield b


def test_every_sub_command_answers_malformed_input_with_its_own_usage_line(bench) -> None:
    assert set(MALFORMED) == {m.NAME for m in COMMANDS}
    for module in COMMANDS:
        answer = bench.post(bench.sender.slash("U0DEPLOYER", MALFORMED[module.NAME], CHANNEL))
        assert answer.status_code == 200
        # The ack itself (only the typist sees it): what is wrong, then the usage line.
        assert answer.text.endswith(f". Usage: `{module.USAGE}`"), (module.NAME, answer.text)
    assert bench.stub.calls_to("response_url") == []  # nothing ran after those acks


def test_a_stranger_clicking_reject_is_refused_without_a_modal_and_audited(bench) -> None:
    bench.slash("U0DEPLOYER", "deploy rel-a to kimi-prod")
    gate = bench.gate_message("artifact", 1)
    assert bench.click("U0STRANGER", gate, REJECT).status_code == 200
    assert "you need the approver role" in bench.replies_to("U0STRANGER")[0].text
    assert bench.stub.calls_to("views.open") == []
    with bench.app.ctx.uow() as uow:
        assert ("U0STRANGER", "access.refused") in {(a.actor, a.action) for a in uow.audit.list(limit=50)}
    assert has_buttons(gate)  # the gate still waits for someone allowed


def test_reject_whose_reason_form_slack_cannot_open_tells_the_clicker_and_decides_nothing(bench) -> None:
    bench.slash("U0DEPLOYER", "deploy rel-a to kimi-prod")
    gate = bench.gate_message("artifact", 1)
    bench.stub.fail_next("views.open", "expired_trigger_id")
    assert bench.click("U0APPROVER1", gate, REJECT).status_code == 200
    told = bench.replies_to("U0APPROVER1")[0].text
    assert "could not open the reason form (expired_trigger_id)" in told and "Click Reject again" in told
    assert has_buttons(gate)  # still waiting: nothing was rejected


def test_the_decided_gate_message_says_who_and_when(bench) -> None:
    bench.slash("U0DEPLOYER", "deploy rel-a to kimi-prod")
    gate = bench.gate_message("artifact", 1)
    bench.click("U0APPROVER1", gate, APPROVE)
    # At once the buttons go and the message says what runs; then the outbox writes who decided and when.
    bench.stub.wait_for(lambda s: re.search(r"Approved by <@U0APPROVER1> at \d{4}-\d\d-\d\d \d\d:\d\d UTC",
                                            blocks_text(gate.blocks)))
    assert not has_buttons(gate)


def test_with_two_gates_waiting_each_button_says_which_deployment_it_decides(bench) -> None:
    bench.slash("U0DEPLOYER", "deploy rel-a to kimi-prod")
    bench.gate_message("artifact", 1)
    bench.slash("U0DEPLOYER", "deploy rel-a to kimi-staging")
    bench.gate_message("artifact", 2)
    bench.slash("U0APPROVER1", "gates")
    listing = bench.replies_to("requester", 3)[-1]
    labels = [e["text"]["text"] for b in listing.blocks if b["type"] == "actions" for e in b["elements"]]
    assert labels == ["Approve #1 artifact", "Reject #1 artifact", "Show every check (1) #1 artifact",
                      "Approve #2 artifact", "Reject #2 artifact", "Show every check (1) #2 artifact"]
    second = next(e for b in listing.blocks if b["type"] == "actions" for e in b["elements"]
                  if e["text"]["text"] == "Approve #2 artifact")
    bench.post(bench.sender.click("U0APPROVER1", listing, APPROVE, second["value"]))
    assert "You approved the artifact gate of deployment #2" in bench.replies_to("U0APPROVER1")[0].text


def test_two_approvers_clicking_at_once_approve_once_and_the_other_is_told_why(bench) -> None:
    bench.slash("U0DEPLOYER", "deploy rel-a to kimi-prod")
    gate = bench.gate_message("artifact", 1)
    clicks = [threading.Thread(target=bench.click, args=(who, gate, APPROVE)) for who in ("U0APPROVER1", "U0APPROVER2")]
    for t in clicks:
        t.start()
    for t in clicks:
        t.join()
    answers = {who: bench.replies_to(who)[0].text for who in ("U0APPROVER1", "U0APPROVER2")}
    approved = [who for who, text in answers.items() if text.startswith("You approved the artifact gate")]
    assert len(approved) == 1, answers
    (other,) = set(answers) - set(approved)
    assert re.search(r"already approved by|decided by someone else|not waiting for a decision", answers[other]), answers
    with bench.app.ctx.uow() as uow:
        approvers = [a.actor for a in uow.audit.list(limit=50) if a.action == "gate.approved"]
    assert approvers == approved
    bench.gate_message("infrastructure", 1)


