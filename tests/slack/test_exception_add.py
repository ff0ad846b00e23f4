"""``/kimi exception add`` in Slack: the CLI's rules and audit, inline or through a form for the reason and expiry.

Signed slash commands and view submissions over HTTP into the running Bolt app;
what people see is read from the Web API stub, what was stored from the database.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from bot.services.releases import register_release
from tests.conftest import START
from tests.slack_support import CHANNEL, SlackBench, blocks_text, start_bench
from tests.workflow_support import ROLES, endpoint_config, release_data

# The Slack edge (or the CLI's wording) is what is tested here, not the store: SQLite only (tests/conftest.py).
pytestmark = pytest.mark.sqlite_only

LATER = f"{START + dt.timedelta(days=90):%Y-%m-%d}"


@pytest.fixture()
def bench(make_ctx: Any) -> Iterator[SlackBench]:
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES)
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    with start_bench(ctx) as b:
        yield b


def recorded(bench: SlackBench) -> list[tuple[str, str, str, str, str]]:
    with bench.app.ctx.uow() as uow:
        return [(e.id, e.kind, f"{e.scope} {e.target}", e.reviewer, e.reason) for e in uow.governance.exceptions()]


def audit(bench: SlackBench) -> set[tuple[str, str]]:
    with bench.app.ctx.uow() as uow:
        return {(a.actor, a.action) for a in uow.audit.list(limit=100)}


def test_an_approver_records_an_exception_inline_and_others_and_bad_input_change_nothing(bench: SlackBench) -> None:
    # Bad input is answered in the acknowledgement, in one line, and nothing runs.
    for text, words in [
        ("exception add SEC-1 kind=root-access release=rel-a", "`kind=` must be one of trust-remote-code, "),
        ("exception add SEC-1 kind=trust-remote-code release=rel-a endpoint=kimi-prod", "scope it to one release"),
        ("exception add SEC-1 kind=trust-remote-code release=rel-a expires=soon", "`expires=` takes a date, YYYY-MM-DD"),
        ("exception add kind=trust-remote-code", "name the exception's id after `add`"),
        ("exception remove SEC-1", "say `add`"),
    ]:
        answer = bench.slash("U0APPROVER1", text)
        assert answer.status_code == 200 and words in answer.text and "Usage: `/kimi exception add ID" in answer.text
    assert bench.stub.calls_to("response_url") == [] and recorded(bench) == []

    full = f"exception add SEC-EXC-2026-0142 kind=trust-remote-code release=rel-a expires={LATER} reason=repo code " \
           "reviewed at the pinned commit; egress restricted"
    bench.slash("U0DEPLOYER", full)  # a deployer is no approver: refused, audited, nothing stored
    assert "you need the approver role" in bench.replies_to("requester")[0].text
    assert recorded(bench) == [] and ("U0DEPLOYER", "access.refused") in audit(bench)

    bench.slash("U0APPROVER1", full)
    told = bench.replies_to("requester", 2)[-1].text
    assert told == (f"Security exception *SEC-EXC-2026-0142* (trust-remote-code) recorded for release *rel-a* until "
                    f"{LATER}, by <@U0APPROVER1>.")
    assert recorded(bench) == [("SEC-EXC-2026-0142", "trust-remote-code", "release rel-a", "U0APPROVER1",
                                "repo code reviewed at the pinned commit; egress restricted")]
    assert ("U0APPROVER1", "exception.recorded") in audit(bench)
    bench.slash("U0APPROVER1", full)  # records are not changed
    assert "already recorded; records are not changed" in bench.replies_to("requester", 3)[-1].text
    bench.slash("U0DEPLOYER", "exceptions")
    assert "SEC-EXC-2026-0142" in blocks_text(bench.replies_to("requester", 4)[-1].blocks)


def test_without_reason_and_expiry_a_form_asks_for_them_and_its_answers_are_held_to_the_same_rules(
        bench: SlackBench) -> None:
    # Someone who may not record it is refused at once: no form to fill in for nothing.
    bench.slash("U0DEPLOYER", "exception add SEC-2 kind=unscanned-image endpoint=kimi-prod")
    assert "you need the approver role" in bench.replies_to("requester")[0].text
    # Nor for a release that does not exist.
    bench.slash("U0APPROVER1", "exception add SEC-2 kind=unscanned-image release=rel-z")
    assert "no release named rel-z" in bench.replies_to("requester", 2)[-1].text
    assert bench.stub.calls_to("views.open") == []

    bench.slash("U0APPROVER1", "exception add SEC-2 kind=unscanned-image endpoint=kimi-prod")
    view = bench.stub.wait_for(lambda s: s.calls_to("views.open"))[0].params["view"]
    assert "Record security exception *SEC-2* (unscanned-image) for endpoint *kimi-prod*?" in blocks_text(view["blocks"])

    def submit(**values: str) -> Any:
        return bench.post(bench.sender.submit("U0APPROVER1", view, {k: {k: v} for k, v in values.items()}))

    # What the form lacks stays in the form, with its message; nothing is stored.
    assert submit(reason="scanner down", expires="").json()["errors"] == {"expires": "Pick the last day the record holds."}
    assert submit(reason=" ", expires=LATER).json()["errors"] == {"reason": "Say why the rule may be broken here."}
    assert "the expiry is a date" in submit(reason="scanner down", expires="someday").json()["errors"]["reason"]
    # A date in the past is the service's refusal, told to the submitter.
    assert submit(reason="scanner down", expires="2020-01-01").status_code == 200
    past = bench.stub.wait_for(lambda s: [m for m in s.messages if m.ephemeral_to == "U0APPROVER1" and "future" in m.text])
    assert "the expiry 2020-01-01 is not in the future" in past[0].text
    assert recorded(bench) == []

    assert submit(reason="ECR scanning is down in the region\n(AWS case 1234, \"it's on us\")", expires=LATER).status_code == 200
    done = bench.stub.wait_for(lambda s: [m for m in s.messages if m.ephemeral_to == "U0APPROVER1" and "recorded" in m.text])
    assert done[0].channel == CHANNEL and "*SEC-2* (unscanned-image) recorded for endpoint *kimi-prod*" in done[0].text
    assert recorded(bench) == [("SEC-2", "unscanned-image", "endpoint kimi-prod", "U0APPROVER1",
                                "ECR scanning is down in the region\n(AWS case 1234, \"it's on us\")")]
    assert ("U0APPROVER1", "exception.recorded") in audit(bench)


def test_a_form_slack_cannot_open_says_how_to_type_it_and_records_nothing(bench: SlackBench) -> None:
    bench.stub.fail_next("views.open", "expired_trigger_id")
    bench.slash("U0APPROVER1", f"exception add SEC-3 kind=payload-capture endpoint=kimi-prod expires={LATER}")
    told = bench.replies_to("requester")[0].text
    assert "Slack could not open the form (expired_trigger_id); nothing was recorded." in told
    assert "Add `expires=YYYY-MM-DD reason=…` to the command to record SEC-3." in told
    assert recorded(bench) == []
