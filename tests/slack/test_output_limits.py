"""What the bot sends stays inside Slack's limits, measured on the bytes it sent; the Web client rides out 429s and resets.

Signed requests over HTTP into the running app; sizes are read from the Slack
stub, which records the length of every body as it arrived.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bot.adapters.slack.blocks import MAX_BLOCKS, json_size, one_post, render
from bot.adapters.slack.identity import web_client
from bot.sandbox.slack_stub import Call, Message, SlackStub
from bot.services.access import Identity
from bot.services.deployments import cancel, request_deploy
from bot.services.releases import register_release
from bot.views.actions import NEXT_PAGE
from bot.views.parts import Text
from tests.slack_support import CHANNEL, SlackBench, blocks_text, start_bench, stop_bench
from tests.workflow_support import ROLES, endpoint_config, fake_ports, release_data

# The Slack edge is what is tested here, not the store: SQLite only (tests/conftest.py). Every store line its
# PostgreSQL runs reached, the other PostgreSQL tests reach too (coverage of bot/adapters/store, 5 December).
pytestmark = pytest.mark.sqlite_only

# Slack answers msg_blocks_too_long from about 13k characters of blocks JSON (the issue measured 13.6k refused).
SLACK_BLOCKS_JSON = 13_000
DEPLOYER = Identity("U0DEPLOYER")


def answers(bench: SlackBench, since: int) -> list[Call]:
    assert bench.app.wait_idle(30)
    return [c for c in bench.stub.calls[since:] if c.method == "response_url"]


def within_slack_limits(call: Call) -> None:
    blocks = call.params.get("blocks") or []
    assert len(blocks) <= MAX_BLOCKS
    assert len(json.dumps(blocks)) <= SLACK_BLOCKS_JSON, f"{len(json.dumps(blocks))} characters of blocks"
    assert call.size <= SLACK_BLOCKS_JSON + 4_000  # blocks, the fallback text and the rest, as sent


def next_button(message: Message | dict[str, Any]) -> dict[str, Any] | None:
    blocks = message.blocks if isinstance(message, Message) else message.get("blocks") or []
    return next((e for b in blocks for e in b.get("elements", []) if e.get("action_id") == NEXT_PAGE), None)


@pytest.fixture(scope="module")
def history_bench(make_module_ctx: Any) -> Iterator[SlackBench]:
    """55 deployments, each cancelled: one bench a database for the history tests, which only read it."""
    ctx = make_module_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles={**ROLES, "viewer": ["U0VIEWER"]},
                          ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    for _ in range(55):
        cancel(ctx, request_deploy(ctx, "rel-a", "kimi-prod", DEPLOYER).id, DEPLOYER)
    with start_bench(ctx) as b:
        yield b


def test_history_of_50_pages_in_one_message_each_with_a_next_button(history_bench: SlackBench) -> None:
    bench = history_bench
    since, shown = len(bench.stub.calls), len(bench.stub.messages)
    assert bench.slash("U0VIEWER", "history kimi-prod 50").status_code == 200
    (first,) = answers(bench, since)  # one post, no overflow posts
    within_slack_limits(first)
    text = blocks_text(first.params["blocks"])
    assert "*#55*" in text and "*#46*" in text and "*#45*" not in text  # the newest ten
    button = next_button(first.params)
    assert button is not None and button["value"] == "history kimi-prod 50 --page 2"

    seen = set()
    page = bench.stub.wait_for(lambda s: [m for m in s.messages[shown:] if m.ephemeral_to == "requester"])[0]
    for number in range(2, 6):
        before = len(bench.stub.messages)
        bench.click("U0VIEWER", page, NEXT_PAGE)
        page = bench.stub.wait_for(lambda s, n=before: [m for m in s.messages[n:] if m.ephemeral_to == "U0VIEWER"])[0]
        assert f"page {number}" in blocks_text(page.blocks)
        seen |= {int(w[2:-1]) for w in blocks_text(page.blocks).split() if w.startswith("*#") and w[2:-1].isdigit()}
    assert seen == set(range(6, 46))  # pages 2-5: the next forty, each once
    assert next_button(page) is None  # the fiftieth is the last asked for


def test_history_page_can_be_typed_and_out_of_range_pages_get_the_usage_line(history_bench: SlackBench) -> None:
    bench = history_bench
    since = len(bench.stub.calls)
    bench.slash("U0VIEWER", "history kimi-prod 50 --page 3")
    (answer,) = answers(bench, since)
    assert "*#35*" in blocks_text(answer.params["blocks"]) and "*#36*" not in blocks_text(answer.params["blocks"])
    refused = bench.slash("U0VIEWER", "history kimi-prod 20 --page 3").text
    assert refused.startswith("page 3 is past the last 20 deployments") and "Usage: `/kimi history" in refused


@pytest.fixture()
def gates_bench(make_ctx: Any) -> Iterator[SlackBench]:
    names = [f"kimi-{i:02d}" for i in range(20)]
    ctx = make_ctx(endpoints=[endpoint_config(n, channel=CHANNEL) for n in names], roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    b = start_bench(ctx)
    for n in names:
        b.slash("U0DEPLOYER", f"deploy rel-a to {n}")
    for deployment in range(1, 21):
        b.gate_message("artifact", deployment)
    yield b
    stop_bench(b)


def test_twenty_waiting_gates_page_five_at_a_time_within_slacks_limits(gates_bench: SlackBench) -> None:
    bench = gates_bench
    assert bench.app.wait_idle(30)
    listed: list[str] = []
    for page in range(1, 5):
        since = len(bench.stub.calls)
        bench.slash("U0APPROVER1", "gates" if page == 1 else f"gates --page {page}")
        (answer,) = answers(bench, since)  # one post a page, no overflow posts
        within_slack_limits(answer)
        labels = [e["text"]["text"] for b in answer.params["blocks"] if b["type"] == "actions" for e in b["elements"]]
        approve = [label for label in labels if label.startswith("Approve")]
        assert len(approve) == 5, labels
        listed += approve
        button = next_button(answer.params)
        assert (button or {}).get("value") == (f"gates --page {page + 1}" if page < 4 else None)
    assert sorted(listed) == sorted(f"Approve #{d} artifact" for d in range(1, 21))  # each gate on one page


def test_sizes_are_measured_on_the_json_sent_not_on_a_python_repr() -> None:
    # Non-ASCII text costs six characters a character in the JSON slack_sdk sends (\\uXXXX), one in str(dict).
    rendered = render([Text("é" * 2900) for _ in range(8)])
    assert len(json.dumps(rendered.blocks)) <= SLACK_BLOCKS_JSON
    assert rendered.overflow  # what did not fit goes beside the message, not into it
    assert json_size(rendered.blocks) == len(json.dumps(rendered.blocks))


def test_overflow_is_one_post_at_most_whatever_its_length() -> None:
    pieces = ["line\n" * 500] * 12
    post = one_post(pieces)
    assert post is not None and json_size(post) <= SLACK_BLOCKS_JSON and "more part(s) not shown" in post
    assert one_post([]) is None and one_post(["short"]) == "short"


def test_a_rate_limited_post_waits_retry_after_and_then_goes_through(make_ctx: Any) -> None:
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    bench = start_bench(ctx)
    try:
        bench.stub.rate_limit_next("chat.postMessage", retry_after=1)
        bench.slash("U0DEPLOYER", "deploy rel-a to kimi-prod")
        bench.gate_message("artifact", 1)
        calls = [c for c in bench.stub.calls if c.method.endswith("chat.postMessage")]
        assert calls[0].method == "ratelimited:chat.postMessage" and calls[1].method == "chat.postMessage"
        assert calls[1].at - calls[0].at >= 1.0  # Slack's Retry-After was honoured, not hammered
    finally:
        stop_bench(bench)


def test_a_dropped_connection_is_tried_again() -> None:
    with SlackStub() as stub:
        stub.drop_next("chat.postMessage")
        started = time.monotonic()
        answer = web_client("xoxb-test", stub.api_url).chat_postMessage(channel=CHANNEL, text="hello")
        assert answer["ok"] and time.monotonic() - started < 10
        assert [c.method for c in stub.calls] == ["dropped:chat.postMessage", "chat.postMessage"]
        assert [m.text for m in stub.messages] == ["hello"]
