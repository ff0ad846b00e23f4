"""A Slack request's job runs in the worker process beside ``kimi-ops serve``, and survives either's crash.

Signed HTTP into the real Bolt app (the answering side, ``role="front"``) and real ``kimi-ops worker`` /
``kimi-ops serve`` processes, against the recording Slack stub and one SQLite file. The answering process
records each job in the shared database inside the acknowledgement; the replica's spool holds one only while
that database does not answer.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from bot.adapters.clock import FrozenClock
from bot.adapters.store import schema
from bot.adapters.store.spool import Spool
from bot.bootstrap import build_context, build_root
from bot.config import load_settings
from bot.sandbox.slack_stub import SlackSender, SlackStub
from bot.services import followups
from bot.services.releases import register_release
from bot.slack.app import create_app
from bot.slack.http import HttpServer
from bot.slack.work import Worker, spool_path
from tests.adapters.test_spool import HELP_JOB
from tests.workflow_support import ROLES, endpoint_config, release_data

SECRET = "worker-test-secret"
TYPIST = "U0TYPIST"
GROUP = "S0VIEWERS"


def _env(tmp_path: Path, stub: SlackStub, **extra: str) -> dict[str, str]:
    config = tmp_path / "kimi.yaml"
    config.write_text(f"roles:\n  viewer: [{GROUP}]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_"))}
    env.update(KIMI_DATA_DIR=str(tmp_path / "data"), KIMI_DATABASE_URL=f"sqlite:///{tmp_path / 'kimi.db'}",
               KIMI_CONFIG=str(config), KIMI_SLACK_API_URL=stub.api_url, SLACK_BOT_TOKEN="xoxb-test",
               SLACK_SIGNING_SECRET=SECRET, **extra)
    return env


def _tied(code: str) -> str:
    """``code`` run by a process that ends with this test process: one left by a test killed at its timeout would
    otherwise outlive the run (ANSWERING_ONLY sleeps ten minutes) and hold the run's output open until it ends."""
    return f"from bot.cli.orphan_guard import die_with; die_with({os.getpid()}); {code}"


def _kimi_ops(env: dict[str, str], cwd: Path, *args: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _tied("from bot.cli.main import main; main()"), *args],
                            env=env, cwd=cwd, text=True, **popen)  # type: ignore[call-overload]


def _until(condition: Callable[[], bool], limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "not within the limit"
        time.sleep(0.05)


def _replies(stub: SlackStub) -> list[str]:
    return [m.text for m in stub.messages if m.channel.startswith("response:")]


def _spooled(tmp_path: Path) -> int:
    """Jobs waiting in the replica's local spool (only while the shared database does not answer)."""
    spool = Spool(spool_path(tmp_path / "data"))
    try:
        return spool.waiting()
    finally:
        spool.close()


@pytest.fixture()
def stub() -> Iterator[SlackStub]:
    with SlackStub(groups={GROUP: [TYPIST]}) as stub:
        yield stub


def test_a_follow_up_whose_worker_is_killed_is_completed_once_by_the_next_worker(tmp_path, stub) -> None:
    env = _env(tmp_path, stub)
    schema.upgrade(env["KIMI_DATABASE_URL"])
    ctx = build_context(load_settings(database_url=env["KIMI_DATABASE_URL"], data_dir=tmp_path / "data",
                                      slack_api_url=stub.api_url, roles={"viewer": [GROUP]}))
    front = create_app(build_root(ctx, slack_token="xoxb-test"), signing_secret=SECRET, role="front")
    http = HttpServer(front.wsgi(), "127.0.0.1", 0).start()
    workers: list[subprocess.Popen[str]] = []
    try:
        # The first worker will be stopped mid-work: while it asks Slack who is in the typist's group.
        hold = stub.hold_next("usergroups.users.list")
        sender = SlackSender(SECRET, stub)
        body = sender.slash(TYPIST, "help")
        answer = httpx.post(f"{http.url}/slack/events", content=body.encode(), headers=sender.headers(body))
        assert answer.status_code == 200  # acknowledged; the answering process ran nothing of it
        # Recorded in the shared database before the answer left: nothing stays with the pod.
        assert _spooled(tmp_path) == 0 and followups.waiting(ctx) == 1 and _replies(stub) == []

        workers.append(_kimi_ops(env, tmp_path, "worker", "--no-jobs", "--lease-seconds", "2"))
        assert hold.reached.wait(60), "the first worker never took the follow-up"
        workers[0].kill()  # kill -9: no chance to finish or give the work back
        workers[0].wait(timeout=90)
        hold.release()
        assert _replies(stub) == [] and followups.waiting(ctx) == 1 and _spooled(tmp_path) == 0  # still there, once

        workers.append(_kimi_ops(env, tmp_path, "worker", "--no-jobs", "--lease-seconds", "2"))
        stub.wait_for(lambda s: _replies(s), timeout=180)
        _until(lambda: followups.waiting(ctx) == 0)  # the worker removes what it finished
        workers[1].send_signal(signal.SIGTERM)
        assert workers[1].wait(timeout=90) == 0
        replies = _replies(stub)
        assert len(replies) == 1 and "/kimi" in replies[0]  # the help text, once
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        http.stop()
        front.close()
        ctx.close()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_serve_answers_through_its_worker_and_starts_it_again_when_it_dies(tmp_path, stub) -> None:
    env = _env(tmp_path, stub, KIMI_AUTO_MIGRATE="1")
    serve = _kimi_ops(env, tmp_path, "serve", "--host", "127.0.0.1", "--port", "0", "--no-jobs",
                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    sender = SlackSender(SECRET, stub)
    try:
        assert serve.stdout is not None
        url = re.search(r"serving on (http://127\.0\.0\.1:\d+)", serve.stdout.readline()).group(1)  # type: ignore[union-attr]
        for round_ in (1, 2):
            body = sender.slash(TYPIST, "help")
            assert httpx.post(f"{url}/slack/events", content=body.encode(), headers=sender.headers(body)).status_code == 200
            stub.wait_for(lambda s, n=round_: len(_replies(s)) == n, timeout=180)
            if round_ == 1:
                (worker,) = _children(serve.pid)
                os.kill(worker, signal.SIGKILL)  # the supervisor starts another; the next request still gets its answer
        assert len(_replies(stub)) == 2
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=180)
    assert serve.returncode == 0


def test_what_needs_the_trigger_runs_at_once_in_the_answering_process(tmp_path, stub) -> None:
    """A form opens with the request's trigger (3 s): those listeners never wait for a worker (none runs here)."""
    url = f"sqlite:///{tmp_path / 'kimi.db'}"
    schema.upgrade(url)
    ctx = build_context(load_settings(database_url=url, data_dir=tmp_path / "data", slack_api_url=stub.api_url,
                                      roles=ROLES, endpoints=[endpoint_config()]))
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    front = create_app(build_root(ctx, slack_token="xoxb-test"), signing_secret=SECRET, role="front")
    http = HttpServer(front.wsgi(), "127.0.0.1", 0).start()
    sender = SlackSender(SECRET, stub)
    try:
        body = sender.slash("U0APPROVER1", "exception add SEC-2 kind=unscanned-image release=rel-a")
        assert httpx.post(f"{http.url}/slack/events", content=body.encode(), headers=sender.headers(body)).status_code == 200
        opened = stub.wait_for(lambda s: s.calls_to("views.open"), timeout=90)
        assert "SEC-2" in str(opened[0].params["view"]) and _spooled(tmp_path) == 0
        body = sender.slash("U0APPROVER1", "help")  # anything else is left to the worker
        assert httpx.post(f"{http.url}/slack/events", content=body.encode(), headers=sender.headers(body)).status_code == 200
        assert followups.waiting(ctx) == 1 and _spooled(tmp_path) == 0 and _replies(stub) == []
    finally:
        http.stop()
        front.close()
        ctx.close()


ANSWERING_ONLY = """
import time
from bot.bootstrap import build_context, build_root
from bot.config import load_settings
from bot.slack.app import create_app
from bot.slack.http import HttpServer
ctx = build_context(load_settings())
front = create_app(build_root(ctx, slack_token="xoxb-test"), signing_secret=ctx.settings.slack_signing_secret or "",
                   role="front")
print(HttpServer(front.wsgi(), "127.0.0.1", 0).start().url, flush=True)
time.sleep(600)
"""


def test_a_job_survives_the_answering_process_killed_after_its_ack_and_its_data_directory_lost(tmp_path, stub) -> None:
    """The answering process (as `serve` runs it, without a worker) dies right after the ack, and the pod's data
    directory goes with it; a worker started later, elsewhere, finds the job in the shared database and answers
    it once."""
    env = _env(tmp_path, stub)
    schema.upgrade(env["KIMI_DATABASE_URL"])
    ctx = build_context(load_settings(database_url=env["KIMI_DATABASE_URL"], data_dir=tmp_path / "data"))
    front = subprocess.Popen([sys.executable, "-c", _tied(ANSWERING_ONLY)], env=env, cwd=tmp_path, text=True,
                             stdout=subprocess.PIPE)
    worker = None
    try:
        assert front.stdout is not None
        url = front.stdout.readline().strip()
        sender = SlackSender(SECRET, stub)
        body = sender.slash(TYPIST, "help")
        assert httpx.post(f"{url}/slack/events", content=body.encode(), headers=sender.headers(body)).status_code == 200
        front.kill()  # kill -9 right after the ack
        front.wait(timeout=90)
        shutil.rmtree(tmp_path / "data")  # the pod's emptyDir goes with it
        assert followups.waiting(ctx) == 1 and _replies(stub) == []

        worker = _kimi_ops(env, tmp_path, "worker", "--no-jobs")
        stub.wait_for(lambda s: _replies(s), timeout=180)
        _until(lambda: followups.waiting(ctx) == 0)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=90) == 0
        replies = _replies(stub)
        assert len(replies) == 1 and "/kimi" in replies[0]
    finally:
        for proc in (front, worker):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        ctx.close()


def test_a_copy_is_refused_by_the_replica_after_its_answering_process_restarts(tmp_path, stub) -> None:
    """The answering process tells a copy from memory, without SQL; what it acknowledged is noted in the spool
    before the answer leaves, so after kill -9 and a restart an exact replay is still refused (401): for a request
    whose job went to the shared database, as for one whose answer was all there was (an unknown command)."""
    env = _env(tmp_path, stub)
    schema.upgrade(env["KIMI_DATABASE_URL"])
    sender = SlackSender(SECRET, stub)
    help_body = sender.slash(TYPIST, "help")
    unknown_body = help_body.replace("command=%2Fkimi", "command=%2Fother")
    assert unknown_body != help_body
    signed = [(body.encode(), sender.headers(body)) for body in (help_body, unknown_body)]
    fronts: list[subprocess.Popen[str]] = []

    def start() -> str:
        front = subprocess.Popen([sys.executable, "-c", _tied(ANSWERING_ONLY)], env=env, cwd=tmp_path, text=True,
                                 stdout=subprocess.PIPE)
        fronts.append(front)
        assert front.stdout is not None
        return front.stdout.readline().strip()

    try:
        url = start()
        answers = [httpx.post(f"{url}/slack/events", content=body, headers=headers) for body, headers in signed]
        assert [a.status_code for a in answers] == [200, 200] and "does not handle `/other`" in answers[1].text
        copies = [httpx.post(f"{url}/slack/events", content=body, headers=headers) for body, headers in signed]
        assert [c.status_code for c in copies] == [401, 401]
        fronts[0].kill()
        fronts[0].wait(timeout=90)

        url = start()
        after = [httpx.post(f"{url}/slack/events", content=body, headers=headers) for body, headers in signed]
        assert [a.status_code for a in after] == [401, 401]
        ctx = build_context(load_settings(database_url=env["KIMI_DATABASE_URL"], data_dir=tmp_path / "data"))
        try:
            assert followups.waiting(ctx) == 1 and _spooled(tmp_path) == 0  # the help request's one job, once
        finally:
            ctx.close()
        fronts[1].kill()
        fronts[1].wait(timeout=90)
        url = start()
        after = [httpx.post(f"{url}/slack/events", content=body, headers=headers) for body, headers in signed]
        assert [a.status_code for a in after] == [401, 401]
        fresh = sender.slash(TYPIST, "help")  # a new invocation (its own trigger) is no copy
        assert httpx.post(f"{url}/slack/events", content=fresh.encode(), headers=sender.headers(fresh)).status_code == 200
    finally:
        for front in fronts:
            if front.poll() is None:
                front.kill()
                front.wait()


def test_spooled_work_a_dead_worker_already_took_on_is_not_taken_twice(tmp_path) -> None:
    """A worker killed between recording a request in the shared database and clearing it from the spool: the
    next worker's claim of the same request is refused, so the spool empties and the work is there once."""
    url = f"sqlite:///{tmp_path / 'kimi.db'}"
    schema.upgrade(url)
    ctx = build_context(load_settings(database_url=url, data_dir=tmp_path / "data"))
    spool = Spool(spool_path(tmp_path / "data"))
    try:
        spool.add("body:one", "command", HELP_JOB)
        assert followups.accept(ctx, "body:one", [("command", HELP_JOB)])  # ...and the worker died here
        Worker(ctx, lambda kind, job: None, spool=spool).move()
        assert spool.waiting() == 0 and followups.waiting(ctx) == 1
        # The worker also forgets claims past the delivery memory (no copy can still come): a worker looking
        # 11 minutes later leaves the key free again.
        later = build_context(ctx.settings, clock=FrozenClock(dt.datetime.now(dt.UTC) + dt.timedelta(minutes=11)))
        try:
            Worker(later, lambda kind, job: None, spool=spool).move()
        finally:
            later.close()
        assert followups.accept(ctx, "body:one", [])
    finally:
        spool.close()
        ctx.close()


def test_a_job_spooled_after_its_request_was_moved_is_recorded_too(tmp_path) -> None:
    """One request, two spooled jobs, the worker looking between them: the second is not lost to the first's claim,
    while a copy of the request on another replica (its own spool) is dropped by the shared claim."""
    url = f"sqlite:///{tmp_path / 'kimi.db'}"
    schema.upgrade(url)
    ctx = build_context(load_settings(database_url=url, data_dir=tmp_path / "data"))
    here, there = Spool(spool_path(tmp_path / "a")), Spool(spool_path(tmp_path / "b"))
    try:
        for spool in (here, there):
            assert spool.first("body:two")
        here.add("body:two", "command", HELP_JOB)
        Worker(ctx, lambda kind, job: None, spool=here).move()
        here.add("body:two", "command", HELP_JOB)
        there.add("body:two", "command", HELP_JOB)  # the same request, delivered to the other replica too
        Worker(ctx, lambda kind, job: None, spool=here).move()
        Worker(ctx, lambda kind, job: None, spool=there).move()
        assert here.waiting() == there.waiting() == 0 and followups.waiting(ctx) == 2
        assert not here.first("body:two")  # a copy to the same replica is still answered from its spool
    finally:
        here.close()
        there.close()
        ctx.close()
