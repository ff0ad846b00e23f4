"""Several ``kimi-ops serve`` replicas on one PostgreSQL database, as real subprocesses behind one Slack app.

Slack is the Web API stub (every answer to a person is a ``response_url`` post
there, so each request's answers are counted); requests are signed as Slack
signs them. Two replicas serve the whole module (a start costs seconds); they
reach the database through the fault-injection suite's TCP proxy
(:class:`tests.fault_support.FaultProxy`), which the readiness case makes unreachable
and heals.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy.engine import make_url

from bot.adapters.store import schema
from bot.sandbox.slack_stub import SlackSender, SlackStub
from tests.fault_support import FaultProxy, unreachable
from tests.slack.test_serve import env_for
from tests.world_support import wait_until

SECRET = "replica-test-signing-secret"
CLI = [sys.executable, "-c", "from bot.cli.main import main; main()"]
# Each replica ends with this test process (its pdeath signal): a run killed at a test's timeout leaves no serve.
TIED_CLI = [sys.executable, "-c", f"from bot.cli.orphan_guard import die_with; die_with({os.getpid()}); {CLI[2]}"]


@contextmanager
def replica(tmp_path: Path, database_url: str, stub: SlackStub, name: str) -> Iterator[tuple[str, str]]:
    """``kimi-ops serve`` over HTTP on an ephemeral port: its URL and its connection line; SIGTERM at the end."""
    home = tmp_path / name
    home.mkdir()
    log = home / "stderr.log"
    with log.open("w") as err:  # a file, not a pipe: nobody reads the log while the replica runs
        proc = subprocess.Popen(
            [*TIED_CLI, "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs"],
            stdout=subprocess.PIPE, stderr=err, text=True, cwd=home,
            env=env_for(home, KIMI_DATABASE_URL=database_url, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET=SECRET,
                        KIMI_SLACK_API_URL=stub.api_url),
        )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", line)
        assert found, line + log.read_text(errors="replace")[-4000:]
        yield found.group(1), proc.stdout.readline()  # type: ignore[union-attr]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == 0, log.read_text(errors="replace")[-4000:]


@dataclass
class Pair:
    """Two replicas on one database (through a proxy the test may cut) behind one Slack stub."""

    stub: SlackStub
    proxy: FaultProxy
    urls: tuple[str, str]
    budget: str  # what the first replica said at start about its connections


@pytest.fixture(scope="module")
def pair(module_pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    schema.upgrade(module_pg_url)  # the migration job ran before the replicas started
    url = make_url(module_pg_url)
    proxy = FaultProxy(url.host or "127.0.0.1", url.port or 5432)
    through_proxy = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    home = tmp_path_factory.mktemp("replicas")
    try:
        with SlackStub() as stub, replica(home, through_proxy, stub, "a") as (a, budget), \
                replica(home, through_proxy, stub, "b") as (b, _):
            yield Pair(stub, proxy, (a, b), budget)
    finally:
        proxy.close()


def _answers(stub: SlackStub, body: str) -> int:
    path = urlsplit(parse_qs(body)["response_url"][0]).path
    return len([c for c in stub.calls_to("response_url") if c.params["url"] == path])


def answers(stub: SlackStub, body: str, settle: float = 1.0) -> int:
    """How many answers the request got (from either replica) once the first came."""
    stub.wait_for(lambda s: _answers(s, body))
    time.sleep(settle)  # a second answer, from either replica, would have been posted by now
    return _answers(stub, body)


def test_the_same_signed_request_delivered_to_two_replicas_is_answered_once(pair: Pair) -> None:
    assert "at most 20 connections from this replica" in pair.budget  # the default pool + overflow, said at start
    sender = SlackSender(SECRET, pair.stub)
    body = sender.slash("U0VIEWER", "help")
    headers = sender.headers(body)
    statuses: list[int] = []
    start = threading.Barrier(2)

    def deliver(url: str) -> None:
        start.wait()
        statuses.append(httpx.post(f"{url}/slack/events", content=body.encode(), headers=headers, timeout=10).status_code)

    threads = [threading.Thread(target=deliver, args=(url,)) for url in pair.urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Each replica acknowledged from its own spool (no shared database before the ack); their workers' claims
    # in the shared database let one run it.
    assert statuses == [200, 200]
    assert answers(pair.stub, body) == 1
    assert httpx.post(f"{pair.urls[0]}/slack/events", content=body.encode(), headers=headers).status_code == 401
    # (the same copy again to a replica that acknowledged it: refused in the ack, from its spool)


def test_a_redelivery_whose_original_was_lost_is_handled_once_across_replicas(pair: Pair) -> None:
    a, b = pair.urls
    sender = SlackSender(SECRET, pair.stub)
    body = sender.slash("U0VIEWER", "help")  # the original never reaches any replica

    def redeliver(url: str, number: int) -> int:
        headers = {**sender.headers(body, timestamp=int(time.time()) + number),
                   "x-slack-retry-num": str(number), "x-slack-retry-reason": "http_timeout"}
        return httpx.post(f"{url}/slack/events", content=body.encode(), headers=headers, timeout=10).status_code

    assert redeliver(a, 1) == 200
    pair.stub.wait_for(lambda s: _answers(s, body))
    assert redeliver(b, 2) == 200  # acknowledged, so Slack stops; not run a second time
    assert redeliver(a, 3) == 200
    assert answers(pair.stub, body) == 1


def test_readyz_is_false_while_the_database_is_unreachable_and_true_again_after(pair: Pair) -> None:
    bot = pair.urls[0]

    def ready() -> httpx.Response:
        return httpx.get(f"{bot}/readyz", timeout=10)

    wait_until("ready with the database answering", lambda: ready().status_code == 200, 30, poll=0.2)
    pair.proxy.fail(unreachable())  # connections reset, new ones refused
    try:
        wait_until("not ready once the database stops answering", lambda: ready().status_code == 503, 30, poll=0.2)
        assert "database" in ready().text
        assert httpx.get(f"{bot}/healthz", timeout=10).status_code == 200  # alive: nothing to restart
    finally:
        pair.proxy.heal()
    wait_until("ready again once the database answers", lambda: ready().status_code == 200, 30, poll=0.2)
