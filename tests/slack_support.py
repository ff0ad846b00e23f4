"""The Slack test bench: the app served over real HTTP on 127.0.0.1, the Web API stub, signed requests.

``SlackBench`` sends what Slack would send (signed, over HTTP) and reads what a
person would see from the stub's recorded calls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import httpx

from bot.adapters.endpoint.tls import tls_context
from bot.bootstrap import build_root
from bot.sandbox.slack_stub import Message, SlackSender, SlackStub
from bot.slack.app import KimiApp, create_app
from bot.slack.http import HttpServer
from bot.views.actions import APPROVE, REJECT

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0KIMIPROD"


@dataclass
class SlackBench:
    app: KimiApp
    stub: SlackStub
    sender: SlackSender
    http: HttpServer
    client: httpx.Client

    def __enter__(self) -> SlackBench:
        return self

    def __exit__(self, *_exc: object) -> None:
        stop_bench(self)

    def post(
        self, body: str, headers: dict[str, str] | None = None, content_type: str = "application/x-www-form-urlencoded",
    ) -> httpx.Response:
        return self.client.post(f"{self.http.url}/slack/events", content=body.encode(),
                                headers=headers or self.sender.headers(body, content_type=content_type))

    def slash(self, user: str, text: str, channel: str = CHANNEL) -> httpx.Response:
        return self.post(self.sender.slash(user, text, channel))

    def click(self, user: str, message: Message, action_id: str) -> httpx.Response:
        return self.post(self.sender.click(user, message, action_id, button(message, action_id)["value"]))

    def home(self, user: str, headers: dict[str, str] | None = None) -> httpx.Response:
        body = self.sender.home_opened(user)
        return self.post(body, headers or self.sender.headers(body, content_type="application/json"), "application/json")

    def replies_to(self, user: str, count: int = 1) -> list[Message]:
        """Wait for ``count`` messages shown only to ``user`` (``"requester"``: answers to a slash command)."""
        return self.stub.wait_for(lambda s: (found := [m for m in s.messages if m.ephemeral_to == user])
                                  and len(found) >= count and found)

    def gate_message(self, gate: str, deployment_id: int) -> Message:
        """The gate message in the deployment's thread, once it has its buttons."""
        def find(stub: SlackStub) -> Message | None:
            for m in stub.messages:
                if m.ephemeral_to is None and f"{gate.capitalize()} gate · deployment #{deployment_id}" in blocks_text(m.blocks):
                    return m
            return None
        return self.stub.wait_for(find)


def button(message: Message, action_id: str) -> dict[str, Any]:
    for block in message.blocks:
        for element in block.get("elements", []):
            if element.get("action_id") == action_id:
                return element
    raise AssertionError(f"no {action_id} button in {json.dumps(message.blocks)[:500]}")


def has_buttons(message: Message) -> bool:
    return any(e.get("action_id") in (APPROVE, REJECT) for b in message.blocks for e in b.get("elements", []))


def blocks_text(blocks: list[dict[str, Any]]) -> str:
    out = []
    for b in blocks:
        text = b.get("text")
        if isinstance(text, dict):
            out.append(text.get("text", ""))
        for e in b.get("elements", []):
            if isinstance(e, dict) and isinstance(e.get("text"), str):
                out.append(e["text"])
            elif isinstance(e, dict) and isinstance(e.get("text"), dict):
                out.append(e["text"].get("text", ""))
    return "\n".join(out)


def start_bench(ctx: Any, groups: dict[str, list[str]] | None = None, missing_channels: set[str] | None = None,
                readiness_pause: float | None = None, outbox_seconds: float = 0.05) -> SlackBench:
    """The app on ``ctx``'s own root (its engine waits ``readiness_pause`` between readiness attempts, if given),
    delivering the outbox every ``outbox_seconds`` besides right after each request's work."""
    stub = SlackStub(groups=groups, missing_channels=missing_channels).start()
    ctx.settings.slack_api_url = stub.api_url
    root = build_root(ctx, slack_token="xoxb-test-token", readiness_pause=readiness_pause)
    app = create_app(root, signing_secret=SECRET, workers=8, outbox_seconds=outbox_seconds)
    http = HttpServer(app.wsgi(), "127.0.0.1", 0, threads=8).start()
    # The process's one TLS context (the endpoint adapters'): a client building its own spends 20 ms of CPU on the CA
    # certificates, for every bench of every Slack test, to talk plain HTTP.
    return SlackBench(app, stub, SlackSender(SECRET, stub), http, httpx.Client(timeout=10, verify=tls_context()))


def stop_bench(bench: SlackBench) -> None:
    bench.client.close()
    bench.http.stop()
    bench.app.close()
    bench.stub.stop()


def progress_texts(stub: SlackStub, deployment_id: int) -> list[str]:
    """The deployment's one progress message as it read after each post and edit, in order (the stub keeps only the last)."""
    key = f"progress:{deployment_id}"
    posted = [c for c in stub.calls_to("chat.postMessage")
              if ((c.params.get("metadata") or {}).get("event_payload") or {}).get("key") == key]
    if not posted:
        return []
    message = next(m for m in stub.messages if ((m.metadata or {}).get("event_payload") or {}).get("key") == key)
    edits = [c.params.get("text", "") for c in stub.calls_to("chat.update") if c.params.get("ts") == message.ts]
    return [posted[0].params.get("text", ""), *edits]


def moves(stub: SlackStub, deployment_id: int) -> list[str]:
    """The steps the progress message says the deployment passed, in order (its ``*steps:*`` line, newest version)."""
    texts = progress_texts(stub, deployment_id)
    found = re.search(r"\*steps:\* ([^\n]+)", texts[-1]) if texts else None
    return [step.strip("*") for step in found.group(1).split(" → ")] if found else []
