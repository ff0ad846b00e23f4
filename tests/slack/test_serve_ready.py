"""``kimi-ops serve`` says it is ready only once it can answer as quickly as it ever will.

The answering process spools each request's follow-up for its worker process; a worker still starting held the
first ``/kimi help`` after a start for seconds while ``/readyz`` already said 200 (issue 35). Readiness now waits
for the worker to say it takes work, and goes back to "starting" while a dead worker's successor starts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bot.sandbox.slack_stub import SlackSender, SlackStub
from tests.slack.test_serve import env_for
from tests.world_support import wait_until

SECRET = "s3cret"
READY_LINE = "takes follow-up work"  # the worker's log line, written before it tells serve it is ready


def _children(pid: int) -> list[int]:
    """``pid``'s child processes (the worker), whichever of its threads started them."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


@pytest.fixture()
def serving(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, SlackStub, Path]]:
    with SlackStub() as stub:
        env = env_for(tmp_path, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET=SECRET, KIMI_SLACK_API_URL=stub.api_url,
                      KIMI_ROLES='{"viewer": ["U0VIEWER"]}')
        proc = subprocess.Popen(
            [sys.executable, "-c", "from bot.cli.main import main; main()",
             "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path, env=env,
        )
        try:
            found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", proc.stdout.readline())  # type: ignore[union-attr]
            assert found, "serve did not start"
            yield proc, found.group(1), stub, tmp_path / "data" / "kimi-ops.log"
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=180)


# How often a wait asks /readyz: each probe is work for serve (and this process), and none of the states waited on
# here lasts less than the worker's restart pause (a second). The probes share one client: ``httpx.get`` makes a
# client, and so loads the CA bundle, each time (25 ms of CPU).
PROBE_EVERY = 0.1
PROBE = httpx.Client(timeout=10)


def _ready(url: str) -> httpx.Response | None:
    answer = PROBE.get(f"{url}/readyz")
    return answer if answer.status_code == 200 else None


def _help_is_answered(url: str, stub: SlackStub) -> None:
    sender = SlackSender(SECRET, stub)
    before = len(stub.calls_to("response_url"))
    body = sender.slash("U0VIEWER", "help")
    assert httpx.post(f"{url}/slack/events", content=body.encode(), headers=sender.headers(body), timeout=10).status_code == 200
    wait_until("the answer to /kimi help", lambda: len(stub.calls_to("response_url")) > before, timeout=180)
    assert "kimi-ops commands" in stub.calls_to("response_url")[-1].params.get("text", "")


def test_serve_is_ready_only_once_its_worker_takes_work(serving) -> None:
    _, url, stub, log_file = serving
    wait_until("serve ready", lambda: _ready(url), timeout=120, poll=PROBE_EVERY)
    # The worker logs that it takes work before it tells serve so: ready means that line is already written.
    assert READY_LINE in log_file.read_text()
    _help_is_answered(url, stub)


def test_a_restarted_worker_makes_serve_not_ready_until_it_takes_work(serving) -> None:
    proc, url, stub, log_file = serving
    wait_until("serve ready", lambda: _ready(url), timeout=120, poll=PROBE_EVERY)
    (worker,) = _children(proc.pid)
    os.kill(worker, signal.SIGKILL)
    starting = wait_until("readiness saying the worker is starting",
                          lambda: (a := PROBE.get(f"{url}/readyz")).status_code == 503 and a.text,
                          poll=PROBE_EVERY)
    assert "the worker process is starting" in starting
    wait_until("serve ready again", lambda: _ready(url), timeout=120, poll=PROBE_EVERY)
    assert log_file.read_text().count(READY_LINE) == 2  # the new worker said it takes work before readiness returned
    _help_is_answered(url, stub)
