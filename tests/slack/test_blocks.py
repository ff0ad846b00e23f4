"""Block Kit stays within Slack's limits however long the report; what does not fit is kept for the thread."""

from __future__ import annotations

import json

import pytest

from bot.adapters.slack.blocks import (
    BUTTON_VALUE_CHARS,
    MAX_BLOCKS,
    SECTION_CHARS,
    chunks,
    render,
)
from bot.domain.checks import Check, GateReport
from bot.domain.read_models import DeploymentView
from bot.domain.states import State
from bot.views.actions import APPROVE, RECHECK, REJECT, SHOW_CHECKS, GateTicket
from bot.views.deployments import deployment_parts
from bot.views.gates import all_checks_parts, decided_note, gate_parts
from bot.views.icons import Icon
from bot.views.parts import Button, Buttons, Text, set_bot_user
from tests.conftest import START
from tests.slack_support import blocks_text

TICKET = GateTicket(7, "artifact", "a" * 64, "b" * 64)


def long_report(n: int, reason_chars: int = 400) -> GateReport:
    # Warnings: a passing check is only counted in the message, so a long report is one of findings.
    checks = [Check.warned(f"weights.object.{i:03d}", "x" * reason_chars) for i in range(n)]
    checks.append(Check.failed("image.scan", "2 critical findings"))
    return GateReport(gate="artifact", checks=checks)


@pytest.mark.parametrize("n", [1, 30, 60, 400])
def test_gate_messages_fit_slack_and_keep_their_buttons(n: int) -> None:
    parts = gate_parts(long_report(n), deployment_id=7, release="r", endpoint="e", actors=(), ticket=TICKET)
    rendered = render(parts)
    assert len(rendered.blocks) <= MAX_BLOCKS
    for block in rendered.blocks:
        if block["type"] == "section":
            assert len(block["text"]["text"]) <= SECTION_CHARS
    assert len(json.dumps(rendered.blocks)) < 13_000  # Slack's observed msg_blocks_too_long ceiling
    actions = [e for b in rendered.blocks if b["type"] == "actions" for e in b["elements"]]
    assert [e["action_id"] for e in actions] == [RECHECK, REJECT]  # a failed check: no Approve
    assert all(len(e["value"]) <= BUTTON_VALUE_CHARS for e in actions)


def test_the_worst_check_is_shown_first_and_the_rest_goes_to_the_thread() -> None:
    rendered = render(gate_parts(long_report(200), deployment_id=7, release="r", endpoint="e", actors=(), ticket=TICKET))
    shown = json.dumps(rendered.blocks)
    assert "image.scan" in shown and "more line(s), posted in the thread below" in shown
    everything = shown + "".join(rendered.overflow)
    assert all(f"weights.object.{i:03d}" in everything for i in range(200))
    assert all(len(piece) <= SECTION_CHARS for piece in rendered.overflow)


def test_passing_checks_are_counted_with_a_show_all_button_and_failures_come_first() -> None:
    report = GateReport(gate="artifact", checks=[*(Check.passed(f"check.{i:02d}", "fine") for i in range(16)),
                                                 Check.warned("image.scan", "1 high finding"),
                                                 Check.failed("weights.objects", "config.json: sha256 differs")])
    rendered = render(gate_parts(report, deployment_id=7, release="r", endpoint="e", actors=(), ticket=TICKET))
    shown = blocks_text(rendered.blocks)
    assert "check.00" not in shown and ":white_check_mark: 16 checks passed" in shown
    assert shown.index("weights.objects") < shown.index("image.scan") < shown.index("16 checks passed")
    buttons = {e["action_id"]: e for b in rendered.blocks if b["type"] == "actions" for e in b["elements"]}
    assert list(buttons) == [RECHECK, REJECT, SHOW_CHECKS] and buttons[SHOW_CHECKS]["text"]["text"] == "Show every check (18)"
    everything = blocks_text(render(all_checks_parts(report, 7, ())).blocks)
    assert all(f"check.{i:02d}" in everything for i in range(16)) and "weights.objects" in everything
    decided = render(gate_parts(report, deployment_id=7, release="r", endpoint="e", actors=()))
    assert "16 checks passed" in blocks_text(decided.blocks) and not [b for b in decided.blocks if b["type"] == "actions"]


def test_a_single_over_long_paragraph_is_split_not_refused() -> None:
    rendered = render([Text("\n".join(f"line {i:04d} " + "y" * 80 for i in range(100)))])
    assert len(rendered.blocks) >= 3 and all(len(b["text"]["text"]) <= SECTION_CHARS for b in rendered.blocks)
    assert chunks("z" * 5000)[0].endswith("…")


def test_a_button_value_over_the_limit_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="2000"):
        render([Buttons((Button("Approve", APPROVE, "v" * 2001),))])


def test_tickets_round_trip_and_approvable_reports_offer_both_buttons() -> None:
    assert GateTicket.decode(TICKET.encode()) == TICKET
    ok = GateReport(gate="model", checks=[Check.warned("model.evaluation", "review by hand")])
    rendered = render(gate_parts(ok, deployment_id=7, release="r", endpoint="e", actors=(), ticket=TICKET))
    ids = [e["action_id"] for b in rendered.blocks if b["type"] == "actions" for e in b["elements"]]
    assert ids == [APPROVE, REJECT]


def _failed_view(rollback_offered: bool) -> DeploymentView:
    return DeploymentView(id=7, endpoint="kimi-prod", release="rel-b", release_hash="b" * 64, kind="deploy", state=State.FAILED,
                          state_reason="rollout failed: image pull backoff", requested_by="U1", replaces_release="rel-a",
                          created_at=START, updated_at=START, finished_at=START, manifest_hash=None,
                          rollback_offered=rollback_offered)


def test_icons_reach_slack_as_emoji_names_and_the_stored_rollback_offer_is_shown() -> None:
    rendered = render(deployment_parts(_failed_view(True)))
    text = json.dumps(rendered.blocks, ensure_ascii=False)
    assert ":red_circle: Deployment #7: deploy of *rel-b* to *kimi-prod* — failed" in text
    assert "Rollback offered: `/kimi rollback kimi-prod`" in text and Icon.FAILED.value not in text + rendered.text
    # The offer is the stored fact: a reason without the words changes nothing, and no fact means no offer.
    assert "Rollback offered" not in json.dumps(render(deployment_parts(_failed_view(False))).blocks)
    checks = render(gate_parts(GateReport(gate="artifact", checks=[Check.warned("image.scan", "1 medium finding")]),
                               deployment_id=7, release="r", endpoint="e", actors=()))
    assert ":warning: *image.scan* (warn): 1 medium finding" in json.dumps(checks.blocks, ensure_ascii=False)


def test_people_are_mentioned_and_kimi_ops_itself_by_its_bot_user() -> None:
    # <@kimi-ops> would render in Slack as a broken mention of an unknown user.
    assert decided_note("approved", "U0APPROVER1", START, None).text.startswith(f"{Icon.PASS} Approved by <@U0APPROVER1> at")
    set_bot_user(None)  # before auth.test named the bot (the CLI): kimi-ops by its name
    auto = decided_note("approved", "kimi-ops", START, "rollback_approvals is 0").text
    assert "by *kimi-ops* at" in auto and "<@" not in auto
    try:
        set_bot_user("UKIMIBOT")  # the Slack app does this with auth.test's user_id when it starts
        assert "by <@UKIMIBOT> at" in decided_note("approved", "kimi-ops", START, None).text
        set_bot_user("kimi-ops")  # never a mention of something that is not a user id
        assert "<@kimi-ops>" not in decided_note("approved", "kimi-ops", START, None).text
    finally:
        set_bot_user(None)
