"""Socket Mode: the same app over Slack's WebSocket protocol, against a local stand-in of Slack's socket server."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
from typing import Any

import pytest
from aiohttp import WSMsgType, web
from slack_bolt.adapter.socket_mode import SocketModeHandler

from tests.slack_support import CHANNEL, blocks_text, start_bench
from tests.workflow_support import ROLES, endpoint_config


class SocketServer:
    """Speaks Slack's Socket Mode: ``hello``, then envelopes; collects the app's acknowledgements."""

    def __init__(self, envelopes: list[dict[str, Any]]) -> None:
        self.envelopes = envelopes
        self.acks: queue.Queue[dict[str, Any]] = queue.Queue()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._links: set[web.WebSocketResponse] = set()

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._links.add(ws)
        await ws.send_json({"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0KIMIOPS"},
                            "debug_info": {"host": "local", "approximate_connection_time": 3600}})
        for envelope in self.envelopes:
            await ws.send_json(envelope)
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                self.acks.put(json.loads(message.data))
        return ws

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/link", self._link)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    def start(self) -> str:
        self._thread.start()
        self._ready.wait(10)
        return f"ws://127.0.0.1:{self.port}/link"

    async def _close_links(self) -> None:
        for ws in list(self._links):
            await ws.close()

    def stop(self) -> None:
        """Close every WebSocket (as Slack does when it goes away), then stop serving."""
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._close_links(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


@pytest.fixture()
def bench(make_ctx):
    with start_bench(make_ctx(endpoints=[endpoint_config(channel=CHANNEL)], roles=ROLES)) as b:
        yield b


def test_a_slash_command_over_socket_mode_is_acknowledged_and_answered(bench) -> None:
    command = {"token": "unused", "team_id": "T0SANDBOX", "api_app_id": "A0KIMIOPS", "channel_id": CHANNEL,
               "user_id": "U0DEPLOYER",
               "command": "/kimi", "text": "release list", "response_url": bench.stub.response_url("socket"),
               "trigger_id": "1.2.socket"}
    malformed = {**command, "text": "deploy", "response_url": bench.stub.response_url("socket")}
    server = SocketServer([
        {"envelope_id": "env-1", "type": "slash_commands", "accepts_response_payload": True, "payload": command},
        {"envelope_id": "env-2", "type": "slash_commands", "accepts_response_payload": True, "payload": malformed},
    ])
    bench.stub.socket_url = server.start()
    handler = SocketModeHandler(bench.app.bolt, "xapp-1-test")
    try:
        handler.connect()
        acks = {}
        while len(acks) < 2:
            ack = server.acks.get(timeout=20)
            acks[ack["envelope_id"]] = ack
        usage = acks["env-2"]["payload"]["text"]  # what is missing, then the usage line
        assert usage.startswith("name the release to deploy") and "/kimi deploy RELEASE [to ENDPOINT]" in usage
        reply = bench.replies_to("requester")[0]
        assert "Releases" in blocks_text(reply.blocks)
        assert bench.stub.calls_to("apps.connections.open")
    finally:
        handler.close()
        server.stop()
