"""Slack request bodies as Slack signs and sends them, built for the hostile-request tests
(``tests/slack/test_hostile_inputs.py``, ``tests/slack/test_foreign_requests.py``): a form or JSON body, a slash
command, a click, an event, a view submission; and a Slack bench per test (``bench``) or per module (``started_bench``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from bot.services.releases import register_release
from tests.slack_support import CHANNEL, SlackBench, start_bench
from tests.workflow_support import ROLES, endpoint_config, fake_ports, release_data

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"


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


def click(bench: SlackBench, actions: Any, **fields: Any) -> str:
    payload = ours(bench, type="block_actions", user=user(bench), actions=actions, response_url=bench.stub.response_url("act"))
    return form({**payload, **fields})


def started_bench(make_ctx: Any) -> SlackBench:
    """The app serving HTTP on ``make_ctx``'s database, ``kimi-prod`` declared and ``rel-a`` registered."""
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    return start_bench(ctx)


@pytest.fixture()
def bench(make_ctx: Any) -> Iterator[SlackBench]:
    with started_bench(make_ctx) as b:
        yield b
