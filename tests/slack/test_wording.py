"""Slack-native wording: what is wrong and what to type, in the place's own syntax, with people named as people.

Each finding of a new engineer's first hour has its case here: usage errors that
name the wrong part, "did you mean" for sub-commands, releases and endpoints,
names in any case, human words for actions, states and subjects, mentions for
people, reasons in the history, and ``/kimi …`` in Slack beside ``kimi-ops …``
in a terminal. The commands run through :func:`commands.registry.dispatch`, the
pure part of the Slack path, on the workflow fakes.
"""

from __future__ import annotations

import pytest

from bot.adapters.slack.blocks import mention_people, render
from bot.bootstrap import build_root
from bot.domain.chat_text import literal
from bot.domain.states import State
from bot.services.deployments import cancel, decide_gate, request_deploy
from bot.services.errors import Forbidden, NotFound
from bot.views.commands import for_terminal
from bot.views.parts import Text
from commands.base import Usage
from commands.registry import COMMANDS, dispatch, parse
from tests.workflow_support import APPROVER_1, REQUESTER, STRANGER, workflow

# The Slack edge (or the CLI's wording) is what is tested here, not the store: SQLite only (tests/conftest.py).
pytestmark = pytest.mark.sqlite_only


@pytest.mark.parametrize("text, problem", [
    ("deploy rel-a kimi-prod", "say `to` before the endpoint: `/kimi deploy rel-a to kimi-prod`"),
    ("deploy rel-a onto kimi-prod", "`onto` stands where `to` goes"),
    ("deploy", "name the release to deploy"),
    ("cancel twelve", "`twelve` is not a deployment number"),
    ("cancel 3 now", "`now`: the only word after the number is `force`"),
    ("history kimi-prod 5 6", "`6` is more than this command takes"),
    ("release shw rel-a", "`shw` is not `list` or `show`; did you mean `show`?"),
    ("rollback kimi-prod rel-a", "say `to` before the release: `/kimi rollback kimi-prod to rel-a`"),
    ("drain stop 4", "`stop` is not `wait` or `abort`"),
    ("deplyo rel-a", "there is no sub-command `deplyo`; did you mean `deploy`? Usage"),  # one stop, not "?."
    ("approve 3", "a gate is approved with the buttons on its message in the deployment's thread; `/kimi gates` lists"),
    ("reject 3 no", "a gate is rejected with the buttons on its message"),
    ("cancel " + "7" * 500, "`" + "7" * 40 + "…` is not a deployment number"),  # never echoed back whole
])
def test_a_usage_error_says_which_part_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(Usage) as refused:
        parse(text)
    assert str(refused.value).startswith(problem), str(refused.value)
    assert str(refused.value).endswith(f"Usage: `{refused.value.usage}`")


def test_keywords_and_names_are_read_in_any_case(make_ctx) -> None:
    assert parse("DEPLOY rel-a TO kimi-prod").args == parse("deploy rel-a to kimi-prod").args
    assert parse("cancel 3 FORCE").args == parse("cancel 3 force").args
    ctx, _ = workflow(make_ctx)
    view = request_deploy(ctx, "REL-A", "KIMI-PROD", REQUESTER)
    assert (view.release, view.endpoint) == ("rel-a", "kimi-prod")


def test_did_you_mean_for_releases_and_endpoints(make_ctx) -> None:
    ctx, _ = workflow(make_ctx)
    with pytest.raises(NotFound) as release:
        request_deploy(ctx, "rel-aa", "kimi-prod", REQUESTER)
    assert str(release.value).startswith("no release named rel-aa; did you mean `rel-a`")
    assert "`/kimi release list` shows the registered ones" in str(release.value)
    with pytest.raises(NotFound) as endpoint:
        request_deploy(ctx, "rel-a", "kimi-prd", REQUESTER)
    assert str(endpoint.value) == "no endpoint named kimi-prd; did you mean `kimi-prod`? Known endpoints: kimi-prod"


def test_refusals_name_actions_and_subjects_in_words(make_ctx) -> None:
    ctx, _ = workflow(make_ctx)
    view = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER)
    with pytest.raises(Forbidden) as forced:
        cancel(ctx, view.id, REQUESTER, force=True)
    assert str(forced.value) == ("you need the admin role to break a stuck deployment's hold on its endpoint "
                                 f"(deployment #{view.id}); ask a kimi-ops admin for it")
    with pytest.raises(Forbidden) as viewing:
        dispatch(build_root(ctx), STRANGER, "status")
    assert str(viewing.value).startswith("you need the viewer role to see endpoints and deployments")
    assert ":" not in str(viewing.value).split(";")[0]  # no `endpoint:*`
    assert State.ARTIFACT_GATE.during == "at the artifact gate" and State.ROLLING_OUT.during == "while rolling out"


def test_people_are_mentions_in_slack_and_reasons_stay_in_the_history(make_ctx) -> None:
    ctx, engine = workflow(make_ctx)
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    assert view.pending is not None
    with pytest.raises(Forbidden):  # refused and audited on the deployment: a refusal is no act on it
        decide_gate(ctx, view.id, "artifact", "approved", STRANGER, seen_report_hash=view.pending.report_hash,
                    seen_release_hash=view.pending.release_hash)
    decide_gate(ctx, view.id, "artifact", "rejected", APPROVER_1, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash,
                reason=f"licence not reviewed, ping U0ABCDEF12, as asked by {STRANGER.user_id}")
    answer = render(dispatch(build_root(ctx), REQUESTER, "history kimi-prod").parts)
    shown = answer.text
    # The approver who rejected is a mention; IDs typed in their reason, even after "by", ping nobody and read as typed.
    assert (f"rejected by <@U0APPROVER1>: licence not reviewed, ping U0ABCDEF12, as asked by {STRANGER.user_id}"
            in shown), shown
    assert "U0APPROVER1" not in shown.replace("<@U0APPROVER1>", "") and "<@U0ABCDEF12>" not in shown
    assert f"<@{STRANGER.user_id}>" not in shown
    # Nor does an id typed of someone who acted on the deployment: only what kimi-ops wrote of them is a mention.
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    assert view.pending is not None
    decide_gate(ctx, view.id, "artifact", "rejected", APPROVER_1, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash,
                reason=f"ask {REQUESTER.user_id} or {APPROVER_1.user_id} for the review")
    shown = render(dispatch(build_root(ctx), REQUESTER, "history kimi-prod").parts).text
    assert (f"rejected by <@{APPROVER_1.user_id}>: ask {REQUESTER.user_id} or {APPROVER_1.user_id} for the review"
            in shown), shown
    # A terminal's document shows the reason as typed, with no invisible mark in it.
    from bot.cli.conventions import plain
    from bot.services.deployments import get_deployment

    assert plain(get_deployment(ctx, view.id))["state_reason"] == (
        f"artifact gate rejected by {APPROVER_1.user_id}: ask {REQUESTER.user_id} or {APPROVER_1.user_id} for the review")
    assert render([Text(f"rejected by U0APPROVER1: {literal('ping U0ABCDEF12 by U0ABCDEF13')}")]).text == (
        "rejected by <@U0APPROVER1>: ping U0ABCDEF12 by U0ABCDEF13")
    # Code keeps what it says; an ID already a mention is left alone.
    assert mention_people("`cancel U0ABCDEF1` by <@U0ABCDEF1>") == "`cancel U0ABCDEF1` by <@U0ABCDEF1>"


def test_commands_are_written_the_way_each_place_types_them() -> None:
    assert for_terminal("wait for it or `/kimi cancel 5`") == "wait for it or `kimi-ops cancel 5`"
    assert for_terminal("an admin can break it with `/kimi cancel 5 force`") == \
        "an admin can break it with `kimi-ops cancel 5 --force`"
    assert for_terminal("`/kimi rollback kimi-prod to rel-a`") == "`kimi-ops rollback kimi-prod --to rel-a`"
    assert for_terminal("`/kimi diff a b`, `/kimi release list`") == "`kimi-ops release diff a b`, `kimi-ops release list`"
    for module in COMMANDS:
        assert "kimi-ops " not in module.HELP + module.USAGE  # Slack's own help never gives the terminal's syntax


def test_help_is_grouped_by_who_uses_it_and_first_says_how_gates_are_decided(make_ctx) -> None:
    from commands.help import GROUPS

    ctx, _ = workflow(make_ctx)
    answer = dispatch(build_root(ctx), REQUESTER, "help")
    text = answer.text
    first = text.split("\n")[1]  # after the heading
    assert "buttons on each gate message" in first and "`/kimi gates`" in first
    titles = [title for title, _ in GROUPS]
    assert [t for t in titles if f"*{t}*" in text] == titles
    grouped = [name for _, names in GROUPS for name in names]
    assert sorted(grouped) == sorted(m.NAME for m in COMMANDS)  # every sub-command, in exactly one group
    for module in COMMANDS:
        assert module.USAGE in text
    entries = [line for line in text.split("\n") if line.startswith("`/kimi")]
    assert len(entries) == len(COMMANDS) and all(len(line.split(" — ", 1)[1]) <= 142 for line in entries)


def test_services_name_people_by_id_and_only_slack_makes_mentions_of_user_ids() -> None:
    # A service writes an actor as stored; Slack's renderer mentions user IDs, and leaves any other actor (a CLI user,
    # kimi-ops itself) as its name, never a broken <@cli:…> or <@kimi-ops>.
    import pathlib

    services = pathlib.Path(__file__).resolve().parents[2] / "bot" / "services"
    raw = [str(p) for p in services.rglob("*.py") if "<@{" in p.read_text() and p.name != "gate_expiry.py"]
    assert raw == [], raw  # gate_expiry mentions only IDs it checked to be users or groups
    shown = render([Text("rolled back by U0APPROVER1; accepted by cli:alice; restored by kimi-ops")]).text
    assert "<@U0APPROVER1>" in shown and "<@cli:alice>" not in shown and "<@kimi-ops>" not in shown
