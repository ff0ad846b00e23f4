"""``kimi-ops serve`` as an operator starts it: credentials checked first, then HTTP with health and metrics.

A start that stops before it serves (a missing credential, Slack or the database away) runs the console script's
``main`` in this process (:func:`tests.cli_support.run_in_process`): the same words, exit code and no traceback,
without an interpreter's start and imports for each; a start that gets as far as its worker process runs as one.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bot.sandbox.slack_stub import SlackStub
from tests.cli_support import run_in_process


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_"))}
    env.update(KIMI_DATA_DIR=str(tmp_path / "data"), KIMI_AUTO_MIGRATE="1", **extra)
    return env


def kimi_ops(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from bot.cli.main import main; main()", *args], capture_output=True,
                          text=True, env=env_for(tmp_path, **extra), cwd=tmp_path, timeout=120)


def stopped_start(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """``kimi-ops ARGS`` for a start that stops before it serves: in this process (see the module's docstring)."""
    return run_in_process(list(args), env_for(tmp_path, **extra), tmp_path)


@pytest.mark.parametrize("args, env, missing", [
    ((), {}, "SLACK_BOT_TOKEN"),
    ((), {"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_SIGNING_SECRET"),
    (("--socket",), {"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_APP_TOKEN"),
])
def test_a_missing_credential_stops_start_up_with_one_line(tmp_path, args, env, missing) -> None:
    done = stopped_start(tmp_path, "serve", *args, **env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {missing} is not set") and "Traceback" not in done.stderr


def test_serve_answers_health_and_metrics_and_stops_on_sigterm(tmp_path) -> None:
    with SlackStub() as stub:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from bot.cli.main import main; main()",
             "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
            env=env_for(tmp_path, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="s3cret", KIMI_SLACK_API_URL=stub.api_url),
        )
        try:
            line = proc.stdout.readline()
            url = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line).group(1)
            assert httpx.get(f"{url}/healthz").text == "ok\n"
            assert "kimi_slack_ack_seconds" in httpx.get(f"{url}/metrics").text
            assert httpx.post(f"{url}/slack/events", content=b"command=/kimi&text=help").status_code == 401  # unsigned
            assert stub.calls_to("auth.test")  # the bot token was checked at start
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=90)
        assert proc.returncode == 0


def _closed_port() -> int:
    with socket.socket() as probe:  # bound, never listening: a connection to it is refused
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _one_named_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one ``error:`` line ``serve`` stopped with (exit 2), never an unexpected error or a traceback."""
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "unexpected" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    return errors[0]


def test_slack_unreachable_at_start_is_one_line_naming_the_url_and_the_cause(tmp_path) -> None:
    api_url = f"http://127.0.0.1:{_closed_port()}/api/"
    done = stopped_start(tmp_path, "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs", SLACK_BOT_TOKEN="xoxb-1",
                    SLACK_SIGNING_SECRET="s3cret", KIMI_SLACK_API_URL=api_url)
    line = _one_named_line(done)
    assert f"{api_url}auth.test did not answer" in line and "Connection refused" in line


def test_slack_refusing_the_bot_token_at_start_is_one_line_naming_the_token(tmp_path) -> None:
    with SlackStub() as stub:
        stub.fail_next("auth.test", "invalid_auth", times=10)
        done = stopped_start(tmp_path, "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs", SLACK_BOT_TOKEN="xoxb-1",
                        SLACK_SIGNING_SECRET="s3cret", KIMI_SLACK_API_URL=stub.api_url)
        line = _one_named_line(done)
        assert line.startswith("error: SLACK_BOT_TOKEN:") and "refused the bot token (invalid_auth)" in line
        assert stub.api_url in line


def test_the_database_unreachable_at_start_is_one_line_naming_it(tmp_path) -> None:
    with SlackStub() as stub:
        done = stopped_start(tmp_path, "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs", SLACK_BOT_TOKEN="xoxb-1",
                        SLACK_SIGNING_SECRET="s3cret", KIMI_SLACK_API_URL=stub.api_url,
                        KIMI_DATABASE_URL=f"postgresql+psycopg://kimi:hunter2pw@127.0.0.1:{_closed_port()}/kimi")
    line = _one_named_line(done)
    assert "cannot reach the database postgresql+psycopg://kimi:***@127.0.0.1" in line and "refused" in line
    assert "hunter2pw" not in done.stderr


def test_slack_refusing_the_app_token_at_start_is_one_line_naming_it(tmp_path) -> None:
    with SlackStub() as stub:
        stub.fail_next("apps.connections.open", "invalid_auth", times=10)
        done = kimi_ops(tmp_path, "serve", "--socket", "--host", "127.0.0.1", "--port", "0", "--no-jobs",
                        SLACK_BOT_TOKEN="xoxb-1", SLACK_APP_TOKEN="xapp-1", KIMI_SLACK_API_URL=stub.api_url)
        line = _one_named_line(done)
        assert line.startswith("error: SLACK_APP_TOKEN:") and "refused the app-level token (invalid_auth)" in line
        assert f"{stub.api_url}apps.connections.open" in line
