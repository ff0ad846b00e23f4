"""An acknowledgement is a promise (issue 31): what ``kimi-ops serve`` answered 200 is carried out exactly once, even
when its pod goes right after, data directory and all.

Real ``kimi-ops serve`` processes over signed Slack HTTP, on PostgreSQL, against the Slack stub (every answer to a
person is a post to the request's ``response_url`` there, so each command's answers are counted). A pod's end is a
signal to its ``serve`` and the removal of its data directory (the manifests mount it as an ``emptyDir``); a
second ``serve``, with a data directory of its own, stands for the pod that replaces it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy.engine import make_url

from bot.adapters.store import schema
from bot.bootstrap import build_context
from bot.config import load_settings
from bot.sandbox.slack_stub import SlackSender, SlackStub
from bot.services import followups
from tests.fault_support import FaultProxy, unreachable
from tests.slack.test_serve import env_for
from tests.world_support import wait_until

SECRET = "acknowledged-work-signing-secret"
CLI = [sys.executable, "-c", "from bot.cli.main import main; main()"]
BURST = 20


@dataclass
class Serve:
    proc: subprocess.Popen[str]
    url: str
    home: Path
    log: Path

    def worker(self) -> int:
        """The pid of this serve's worker process."""
        def child() -> int | None:
            for entry in Path("/proc").iterdir():
                try:
                    if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == \
                            self.proc.pid:
                        return int(entry.name)
                except (OSError, IndexError, ValueError):
                    continue
            return None

        return wait_until("serve's worker process", child, timeout=60, poll=0.05)  # each look reads all of /proc

    def logged(self) -> str:
        """Everything serve and its worker logged so far (the log file in the data directory has every level)."""
        try:
            return (self.home / "data" / "kimi-ops.log").read_text(errors="replace")
        except OSError:
            return ""

    def end(self, sig: int) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=120)


def start_serve(home: Path, database_url: str, stub: SlackStub) -> Serve:
    home.mkdir(parents=True)
    log = home / "stderr.log"
    with log.open("w") as err:
        proc = subprocess.Popen([*CLI, "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs"],
                                stdout=subprocess.PIPE, stderr=err, text=True, cwd=home,
                                env=env_for(home, KIMI_DATABASE_URL=database_url, SLACK_BOT_TOKEN="xoxb-1",
                                            SLACK_SIGNING_SECRET=SECRET, KIMI_SLACK_API_URL=stub.api_url))
    assert proc.stdout is not None
    found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", proc.stdout.readline())
    assert found, log.read_text(errors="replace")[-4000:]
    return Serve(proc, found.group(1), home, log)


@pytest.fixture()
def stub() -> Iterator[SlackStub]:
    with SlackStub() as stub:
        yield stub


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[list[Serve]]:
    """Every serve a test starts, SIGKILLed at the end if still running."""
    started: list[Serve] = []
    yield started
    for serve in started:
        if serve.proc.poll() is None:
            serve.proc.kill()
            serve.proc.wait()


def answers(stub: SlackStub, body: str) -> list[str]:
    """The texts posted to ``body``'s response URL, in order."""
    path = urlsplit(parse_qs(body)["response_url"][0]).path
    return [str(c.params.get("text") or "") for c in stub.calls_to("response_url") if c.params["url"] == path]


def burst(serve: Serve, sender: SlackSender, count: int = BURST) -> list[str]:
    """``count`` signed ``/kimi help`` commands (each its own invocation), every one acknowledged 200."""
    bodies = [sender.slash(f"U0TYPIST{n:02d}", "help") for n in range(count)]
    with httpx.Client(timeout=30) as http:
        for body in bodies:
            answer = http.post(f"{serve.url}/slack/events", content=body.encode(), headers=sender.headers(body))
            assert answer.status_code == 200, answer.text
    return bodies


def each_carried_out_once(stub: SlackStub, database_url: str, bodies: list[str]) -> None:
    """Wait until no job is left in the shared database (a job's row goes once its answer is posted), then find
    exactly one help text for every acknowledged command."""
    ctx = build_context(load_settings(database_url=database_url), check=False)
    try:
        wait_until("every acknowledged job done", lambda: followups.waiting(ctx) == 0, timeout=180, poll=0.1)
    finally:
        ctx.close()
    counts = [len([text for text in answers(stub, body) if "runs now" not in text]) for body in bodies]
    assert counts == [1] * len(bodies), counts


def test_a_pod_ended_by_sigterm_with_its_data_directory_deleted_loses_nothing_it_acknowledged(
        tmp_path, fresh_pg_url, stub, served) -> None:
    schema.upgrade(fresh_pg_url)
    sender = SlackSender(SECRET, stub)
    first = start_serve(tmp_path / "pod-a", fresh_pg_url, stub)
    served.append(first)
    bodies = burst(first, sender)
    assert first.end(signal.SIGTERM) == 0, first.log.read_text(errors="replace")[-4000:]
    shutil.rmtree(first.home / "data")  # the emptyDir goes with the pod

    served.append(start_serve(tmp_path / "pod-b", fresh_pg_url, stub))
    each_carried_out_once(stub, fresh_pg_url, bodies)


def test_a_pod_killed_right_after_a_burst_with_its_data_directory_deleted_loses_nothing_it_acknowledged(
        tmp_path, fresh_pg_url, stub, served) -> None:
    schema.upgrade(fresh_pg_url)
    sender = SlackSender(SECRET, stub)
    first = start_serve(tmp_path / "pod-a", fresh_pg_url, stub)
    served.append(first)
    # The worst moment: the worker has not run any of them yet (stopped, as a worker busy elsewhere would be). It is
    # stopped once it takes work: stopped before its first instruction, it would never arm the parent-death signal
    # and would outlive the test.
    wait_until("serve's worker taking work", lambda: "takes follow-up work" in first.logged(), timeout=120, poll=0.1)
    os.kill(first.worker(), signal.SIGSTOP)
    bodies = burst(first, sender)
    assert first.end(signal.SIGKILL) == -signal.SIGKILL  # its worker goes with it (parent-death signal)
    shutil.rmtree(first.home / "data")
    assert all(answers(stub, body) == [] for body in bodies)  # nothing ran before the pod went

    served.append(start_serve(tmp_path / "pod-b", fresh_pg_url, stub))
    each_carried_out_once(stub, fresh_pg_url, bodies)


def test_a_command_the_database_cannot_take_is_queued_out_loud_and_drained_at_sigterm(
        tmp_path, fresh_pg_url, stub, served) -> None:
    """The shared database cut: the acknowledgement says the command is queued on this replica; SIGTERM waits
    for the database to come back and moves it there before the pod goes; the replica after it runs it once and
    says when it ran."""
    schema.upgrade(fresh_pg_url)
    url = make_url(fresh_pg_url)
    proxy = FaultProxy(url.host or "127.0.0.1", url.port or 5432)
    through_proxy = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    sender = SlackSender(SECRET, stub)
    try:
        first = start_serve(tmp_path / "pod-a", through_proxy, stub)
        served.append(first)
        wait_until("serve's worker taking work", lambda: "takes follow-up work" in first.logged(), timeout=120, poll=0.1)
        proxy.fail(unreachable())
        body = sender.slash("U0TYPIST", "help")
        answer = httpx.post(f"{first.url}/slack/events", content=body.encode(), headers=sender.headers(body),
                            timeout=30)
        assert answer.status_code == 200
        assert "Queued on this replica" in answer.text and "will run when it answers" in answer.text
        assert "`/kimi help`" in answer.text

        first.proc.send_signal(signal.SIGTERM)
        # The worker is draining its spool and the database still does not answer: it keeps trying.
        wait_until("the worker trying to drain its spool",
                   lambda: "could not take spooled Slack work" in first.logged(), timeout=120, poll=0.1)
        proxy.heal()
        assert first.proc.wait(timeout=120) == 0, first.log.read_text(errors="replace")[-4000:]
        shutil.rmtree(first.home / "data")
        assert answers(stub, body) == []
    finally:
        proxy.close()

    served.append(start_serve(tmp_path / "pod-b", fresh_pg_url, stub))
    each_carried_out_once(stub, fresh_pg_url, [body])
    [said] = [text for text in answers(stub, body) if "runs now" in text]
    assert "`/kimi help`, queued on" in said and "while the shared database was away" in said
