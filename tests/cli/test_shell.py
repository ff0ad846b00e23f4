"""The local shell: the same dispatch path as Slack, read as text, buttons pressed by number, users switched, files
shown as one line."""

from __future__ import annotations

import re

import pytest
from slack_sdk import WebClient

from bot.cli.shell import Shell
from bot.services.releases import register_release
from tests.workflow_support import ROLES, endpoint_config, fake_ports, release_data

# The Slack edge (or the CLI's wording) is what is tested here, not the store: SQLite only (tests/conftest.py).
pytestmark = pytest.mark.sqlite_only


@pytest.fixture()
def console(make_ctx):
    ctx = make_ctx(endpoints=[endpoint_config()], roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    shell = Shell(ctx, user="U0DEPLOYER")
    yield shell
    shell.close()


def number_of(lines: list[str], label: str) -> str:
    for line in reversed(lines):
        found = re.search(rf"\[(\d+)\] {label}", line)
        if found:
            return found.group(1)
    raise AssertionError(f"no {label} button in:\n" + "\n".join(lines))


def test_deploy_shows_the_thread_and_numbered_buttons(console) -> None:
    out = console.handle("/kimi deploy rel-a")
    text = "\n".join(out)
    assert "Deployment #1 of *rel-a* to *kimi-prod* requested" in text
    assert "== Artifact gate · deployment #1 ==" in text
    assert "✅ *image.pinned* (pass)" not in text and "✅ 1 check passed" in text
    assert number_of(out, "Approve") and number_of(out, "Reject")
    assert "✅ *image.pinned* (pass): pinned" in "\n".join(console.handle(number_of(out, r"Show every check")))


def test_separation_of_duties_by_switching_user_and_pressing_numbers(console) -> None:
    out = console.handle("/kimi deploy rel-a")
    approve = number_of(out, "Approve")
    refused = "\n".join(console.handle(approve))
    assert "you need the approver role" in refused
    assert console.handle("/as U0APPROVER1") == ["now acting as U0APPROVER1"]
    done = "\n".join(console.handle(approve))
    assert "(updated)" in done and "Approved by @U0APPROVER1" in done
    assert "== Infrastructure gate · deployment #1 ==" in done


def test_reject_asks_for_the_reason_on_the_next_line(console) -> None:
    out = console.handle("/kimi deploy rel-a")
    console.handle("/as U0APPROVER1")
    asked = console.handle(number_of(out, "Reject"))
    assert asked[-1] == "Reason for rejecting (one line):"
    after = "\n".join(console.handle("image digest is not the reviewed one"))
    assert "Rejected by @U0APPROVER1" in after and "image digest is not the reviewed one" in after
    assert "rejected" in after


def test_malformed_input_gets_usage_and_help_is_local(console) -> None:
    assert "Usage: `/kimi cancel DEPLOYMENT [force]`" in "\n".join(console.handle("/kimi cancel"))
    assert console.handle("/as someone")[0].startswith("usage: /as")
    assert "no button [9]" in console.handle("9")[0]


def test_the_demo_names_the_state_and_its_reason_when_a_deployment_is_not_live(console) -> None:
    from bot.cli.demo_tour import ScriptFailed, Tour

    tour = Tour(console, lambda _line: None)
    out = console.handle("/kimi deploy rel-a")
    console.handle("/as U0APPROVER1")
    console.handle(number_of(out, "Reject"))
    console.handle("image digest is not the reviewed one")
    with pytest.raises(ScriptFailed, match=r"deployment #1 is rejected, not live: .*image digest is not the reviewed one"):
        tour.expect_live(1)


def test_a_command_form_is_answered_on_one_line_in_the_shell(console) -> None:
    console.handle("/as U0APPROVER1")
    out = console.handle("/kimi exception add SEC-9 kind=unscanned-image endpoint=kimi-prod")
    assert out[-1] == "Last day it holds (YYYY-MM-DD), then the reason, on one line:"
    answer = "\n".join(console.handle("2026-12-31 ECR scanning is down in the region"))
    assert "*SEC-9* (unscanned-image) recorded for endpoint *kimi-prod* until 2026-12-31" in answer


def test_every_reply_says_who_sees_it_and_slack_markup_reads_as_slack_shows_it(console) -> None:
    from bot.adapters.slack.blocks import EMOJI
    from bot.cli.shell import mrkdwn_to_text

    out = console.handle("/kimi deploy rel-a")
    labels = [line for line in out if line.startswith("[")]
    assert labels and all(line.endswith(("only you see]", "everyone sees]", "everyone sees] (updated)"))
                          for line in labels), labels
    assert not re.search(r":[a-z_]+:", "\n".join(out))  # no emoji name printed raw
    for name in EMOJI.values():  # every icon the bot sends shows as the emoji Slack shows
        assert not re.search(r":[a-z_]+:", mrkdwn_to_text(name)), name
    now = console.ctx.clock.now()
    said = mrkdwn_to_text(f"began <!date^{int(now.timestamp()) - 180}^{{ago}}|09:00 UTC>", now)
    assert said == "began 3 minutes ago"


def test_the_console_runs_the_scheduled_jobs_as_serve_does(console) -> None:
    from bot.services.deployments import decide_gate, request_deploy
    from tests.workflow_support import ADMIN, APPROVER_1, REQUESTER
    from tests.world_support import wait_until

    engine, ctx = console.app.root.engine, console.ctx
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    while view.pending is not None:  # live, so the metrics watch has an endpoint to read
        decide_gate(ctx, view.id, view.pending.gate, "approved", APPROVER_1 if view.pending.gate != "infrastructure"
                    else ADMIN, seen_report_hash=view.pending.report_hash, seen_release_hash=view.pending.release_hash)
        view = engine.advance(view.id)
    assert view.state == "live"
    before = "\n".join(console.handle("/kimi reservations"))
    assert "None seen yet" in before
    assert "no reading of this endpoint yet" in "\n".join(console.handle("/kimi slo"))
    console.start_jobs()

    def ran() -> set[str]:
        with console.ctx.uow() as uow:
            return {a.subject for a in uow.audit.list(limit=200) if a.action == "job.run"}

    wait_until("the reservation watch and the metrics watch", lambda: {"job:reservation-watch", "job:metrics-watch"} <= ran(),
               timeout=60)
    after = "\n".join(console.handle("/kimi reservations"))
    assert "None seen yet" not in after, after
    slo = "\n".join(console.handle("/kimi slo"))
    assert "no reading of this endpoint yet" not in slo, slo


def test_the_shell_shows_an_uploaded_file_as_one_line(make_ctx) -> None:
    ctx = make_ctx(endpoints=[endpoint_config(channel="C0SHELL")], roles=ROLES)
    console = Shell(ctx, user="U0APPROVER1")
    try:
        client = WebClient(token="xoxb-t", base_url=console.stub.api_url)
        posted = client.chat_postMessage(channel="C0SHELL", text="Deployment #1")
        console.new_output()
        client.files_upload_v2(channel="C0SHELL", thread_ts=posted["ts"], file=b"\x89PNG" + b"\0" * 35_000,
                               filename="traffic-sweep.png", title="sweep")
        assert console.new_output() == [f"[thread {posted['ts']} · everyone sees]", "  [file traffic-sweep.png, 34 KB]"]
    finally:
        console.close()
