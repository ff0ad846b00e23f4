"""``kimi-ops serve --socket`` as the cluster runs it: commands over Slack's WebSocket, counted in ``/metrics``.

The process is the real console script; Slack is the Web API stub plus the
Socket Mode stand-in of ``test_slack_socket_mode``. In the cluster the bot runs
in Socket Mode only, so its ``/metrics`` must count what arrives on the socket.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from bot.sandbox.slack_stub import SlackStub
from tests.slack.test_serve import env_for
from tests.slack.test_socket_mode import SocketServer


def test_serve_socket_answers_commands_and_counts_them_in_metrics(tmp_path: Path) -> None:
    with SlackStub() as stub:
        command = {"token": "unused", "team_id": "T0SANDBOX", "api_app_id": "A0KIMIOPS", "channel_id": "C0KIMIPROD",
                   "user_id": "U0DEPLOYER",
                   "command": "/kimi", "text": "help", "response_url": stub.response_url("socket"), "trigger_id": "1.2.socket"}
        malformed = {**command, "text": "deploy", "response_url": stub.response_url("socket")}
        server = SocketServer([
            {"envelope_id": "env-1", "type": "slash_commands", "accepts_response_payload": True, "payload": command},
            {"envelope_id": "env-2", "type": "slash_commands", "accepts_response_payload": True, "payload": malformed},
        ])
        stub.socket_url = server.start()
        proc = subprocess.Popen(
            [sys.executable, "-c", "from bot.cli.main import main; main()",
             "serve", "--socket", "--host", "127.0.0.1", "--port", "0", "--no-jobs"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
            env=env_for(tmp_path, SLACK_BOT_TOKEN="xoxb-1", SLACK_APP_TOKEN="xapp-1-test", KIMI_SLACK_API_URL=stub.api_url),
        )
        try:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            found = re.search(r"serving on (http://127\.0\.0\.1:\d+) \(Socket Mode\)", line)
            assert found, line + (proc.stderr.read() if proc.poll() is not None else "")  # type: ignore[union-attr]
            acks = {}
            while len(acks) < 2:
                ack = server.acks.get(timeout=90)
                acks[ack["envelope_id"]] = ack
            usage = acks["env-2"]["payload"]["text"]  # what is missing, then the usage line
            assert usage.startswith("name the release to deploy") and "/kimi deploy RELEASE [to ENDPOINT]" in usage
            answer = stub.wait_for(lambda s: s.calls_to("response_url"), timeout=90)[0]
            assert "/kimi deploy RELEASE [to ENDPOINT]" in str(answer.params)  # help, taken from the modules
            metrics = httpx.get(f"{found.group(1)}/metrics").text
            assert 'kimi_slack_requests_total{kind="command",status="200"} 2.0' in metrics
            assert 'kimi_slack_ack_seconds_count{kind="command"} 2.0' in metrics
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=90)
            server.stop()
        assert proc.returncode == 0, proc.stderr.read()  # type: ignore[union-attr]


def test_serve_socket_is_ready_only_while_its_connection_to_slack_is_up(tmp_path: Path) -> None:
    from tests.world_support import wait_until

    with SlackStub() as stub:
        server = SocketServer([])
        stub.socket_url = server.start()
        proc = subprocess.Popen(
            [sys.executable, "-c", "from bot.cli.main import main; main()",
             "serve", "--socket", "--host", "127.0.0.1", "--port", "0", "--no-jobs"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
            env=env_for(tmp_path, SLACK_BOT_TOKEN="xoxb-1", SLACK_APP_TOKEN="xapp-1-test", KIMI_SLACK_API_URL=stub.api_url),
        )
        try:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
            assert found, line
            url = found.group(1)
            with httpx.Client() as probe:  # one client: httpx.get loads the CA bundle each time (25 ms of CPU)
                wait_until("ready once the WebSocket is up", lambda: probe.get(f"{url}/readyz").status_code == 200,
                           poll=0.1)
                server.stop()  # Slack's end closes the WebSocket and stays away
                wait_until("not ready without the WebSocket", lambda: probe.get(f"{url}/readyz").status_code == 503,
                           poll=0.1)
                assert "Socket Mode connection" in probe.get(f"{url}/readyz").text
                assert probe.get(f"{url}/healthz").status_code == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=90)
