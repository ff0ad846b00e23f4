"""The follow-up of a Slack request runs in the worker process beside ``kimi-ops serve``, and survives its crash.

Signed HTTP into the real Bolt app (the answering side, ``role="front"``) and real ``kimi-ops worker`` /
``kimi-ops serve`` processes, against the recording Slack stub and one SQLite file.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from tests.workflow_support import ROLES, endpoint_config, release_data

SECRET = "worker-test-secret"
TYPIST = "U0TYPIST"
GROUP = "S0VIEWERS"
# One recorded run of `/kimi help`, as the answering process spools it.
HELP_RUN = {"mode": "http", "body": "command=%2Fkimi&text=help", "query": {}, "headers": {}}


def _env(tmp_path: Path, stub: SlackStub, **extra: str) -> dict[str, str]:
    config = tmp_path / "kimi.yaml"
    config.write_text(f"roles:\n  viewer: [{GROUP}]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_"))}
    env.update(KIMI_DATA_DIR=str(tmp_path / "data"), KIMI_DATABASE_URL=f"sqlite:///{tmp_path / 'kimi.db'}",
               KIMI_CONFIG=str(config), KIMI_SLACK_API_URL=stub.api_url, SLACK_BOT_TOKEN="xoxb-test",
               SLACK_SIGNING_SECRET=SECRET, **extra)
    return env


def _kimi_ops(env: dict[str, str], cwd: Path, *args: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", "from bot.cli.main import main; main()", *args],
                            env=env, cwd=cwd, text=True, **popen)  # type: ignore[call-overload]


def _until(condition: Callable[[], bool], limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "not within the limit"
        time.sleep(0.05)


def _replies(stub: SlackStub) -> list[str]:
    return [m.text for m in stub.messages if m.channel.startswith("response:")]


def _spooled(tmp_path: Path) -> int:
    """Runs waiting in the replica's local spool (the answering process writes nothing else before its ack)."""
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
        assert _spooled(tmp_path) == 1 and followups.waiting(ctx) == 0 and _replies(stub) == []  # spooled only

        workers.append(_kimi_ops(env, tmp_path, "worker", "--no-jobs", "--lease-seconds", "2"))
        assert hold.reached.wait(60), "the first worker never took the follow-up"
        workers[0].kill()  # kill -9: no chance to finish or give the work back
        workers[0].wait(timeout=90)
        hold.release()
        assert _replies(stub) == [] and followups.waiting(ctx) == 1 and _spooled(tmp_path) == 0  # moved, claimed

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
        assert _spooled(tmp_path) == 1 and _replies(stub) == []
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


def test_a_spooled_follow_up_survives_the_answering_process_killed_after_its_ack(tmp_path, stub) -> None:
    """The answering process (as `serve` runs it, without a worker) dies right after the ack; a worker started
    later finds the work in the replica's spool and answers it once."""
    env = _env(tmp_path, stub)
    schema.upgrade(env["KIMI_DATABASE_URL"])
    ctx = build_context(load_settings(database_url=env["KIMI_DATABASE_URL"], data_dir=tmp_path / "data"))
    front = subprocess.Popen([sys.executable, "-c", ANSWERING_ONLY], env=env, cwd=tmp_path, text=True,
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
        assert _spooled(tmp_path) == 1 and followups.waiting(ctx) == 0 and _replies(stub) == []

        worker = _kimi_ops(env, tmp_path, "worker", "--no-jobs")
        stub.wait_for(lambda s: _replies(s), timeout=180)
        _until(lambda: _spooled(tmp_path) == 0 and followups.waiting(ctx) == 0)
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
    """The answering process tells a copy from memory, without SQL; what it acknowledged is in the spool before
    the answer leaves, so after kill -9 and a restart an exact replay is still refused (401): for a request that
    spooled work, before and after the worker moved it, as for one whose answer was all there was (an unknown
    command)."""
    env = _env(tmp_path, stub)
    schema.upgrade(env["KIMI_DATABASE_URL"])
    sender = SlackSender(SECRET, stub)
    help_body = sender.slash(TYPIST, "help")
    unknown_body = help_body.replace("command=%2Fkimi", "command=%2Fother")
    assert unknown_body != help_body
    signed = [(body.encode(), sender.headers(body)) for body in (help_body, unknown_body)]
    fronts: list[subprocess.Popen[str]] = []

    def start() -> str:
        front = subprocess.Popen([sys.executable, "-c", ANSWERING_ONLY], env=env, cwd=tmp_path, text=True,
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
        assert _spooled(tmp_path) == 1  # the help request's one run, spooled once
        fronts[1].kill()
        fronts[1].wait(timeout=90)

        # A worker moves the run into the shared database (off the spool): the key is still this replica's.
        ctx = build_context(load_settings(database_url=env["KIMI_DATABASE_URL"], data_dir=tmp_path / "data"))
        spool = Spool(spool_path(tmp_path / "data"))
        try:
            Worker(ctx, lambda request: None, spool=spool).move()
        finally:
            spool.close()
            ctx.close()
        assert _spooled(tmp_path) == 0
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
        spool.add("body:one", "run_command", HELP_RUN)
        assert followups.accept(ctx, "body:one", [("run_command", HELP_RUN)])  # ...and the worker died here
        Worker(ctx, lambda request: None, spool=spool).move()
        assert spool.waiting() == 0 and followups.waiting(ctx) == 1
        # The worker also forgets claims past the delivery memory (no copy can still come): a worker looking
        # 11 minutes later leaves the key free again.
        later = build_context(ctx.settings, clock=FrozenClock(dt.datetime.now(dt.UTC) + dt.timedelta(minutes=11)))
        try:
            Worker(later, lambda request: None, spool=spool).move()
        finally:
            later.close()
        assert followups.accept(ctx, "body:one", [])
    finally:
        spool.close()
        ctx.close()


def test_a_run_spooled_after_its_request_was_moved_is_recorded_too(tmp_path) -> None:
    """One request, two lazy runs, the worker looking between them: the second is not lost to the first's claim,
    while a copy of the request on another replica (its own spool) is dropped by the shared claim."""
    url = f"sqlite:///{tmp_path / 'kimi.db'}"
    schema.upgrade(url)
    ctx = build_context(load_settings(database_url=url, data_dir=tmp_path / "data"))
    here, there = Spool(spool_path(tmp_path / "a")), Spool(spool_path(tmp_path / "b"))
    try:
        for spool in (here, there):
            assert spool.first("body:two")
        here.add("body:two", "first_run", HELP_RUN)
        Worker(ctx, lambda request: None, spool=here).move()
        here.add("body:two", "second_run", HELP_RUN)
        there.add("body:two", "first_run", HELP_RUN)  # the same request, delivered to the other replica too
        Worker(ctx, lambda request: None, spool=here).move()
        Worker(ctx, lambda request: None, spool=there).move()
        assert here.waiting() == there.waiting() == 0 and followups.waiting(ctx) == 2
        assert not here.first("body:two")  # a copy to the same replica is still answered from its spool
    finally:
        here.close()
        there.close()
        ctx.close()


def test_requests_waiting_on_a_busy_spool_give_up_together_within_its_bound(tmp_path) -> None:
    """The worker holds the spool's write lock and stalls: the answering process's threads, queued on the one
    spool connection, each give up within the spool's bound (then run their work themselves), not one bound after
    another, which would take the fourth past Slack's 3 seconds."""
    path = spool_path(tmp_path / "data")
    spool = Spool(path, busy_ms=500)
    stalled = sqlite3.connect(path, isolation_level=None)
    stalled.execute("BEGIN IMMEDIATE")  # the worker, mid-move
    outcomes: list[tuple[str, float]] = []

    def answer(n: int) -> None:
        started = time.monotonic()
        try:
            spool.add(f"body:{n}", "run_command", HELP_RUN)
            outcomes.append(("spooled", time.monotonic() - started))
        except sqlite3.OperationalError:
            outcomes.append(("busy", time.monotonic() - started))

    try:
        threads = [threading.Thread(target=answer, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert [outcome for outcome, _ in outcomes] == ["busy"] * 4
        # One after another they would have taken 0.5, 1.0, 1.5 and 2.0 s.
        assert max(seconds for _, seconds in outcomes) < 1.0, outcomes
        stalled.execute("ROLLBACK")
        spool.add("body:later", "run_command", HELP_RUN)  # the worker moved on: the spool takes work again
        assert spool.waiting() == 1
    finally:
        stalled.close()
        spool.close()


def test_a_second_mover_never_deletes_another_requests_item_that_reused_an_id(tmp_path) -> None:
    """Two movers on one spool (an orphaned worker not yet gone beside its successor) read the same item; the first
    moves it, the answering process spools a new request, whose item takes the freed id; the second mover's
    late delete of the old item leaves the new one."""
    spool = Spool(spool_path(tmp_path / "data"))
    try:
        spool.add("body:a", "run_command", HELP_RUN)
        [first] = spool.pending()
        [also] = spool.pending()  # the other mover's look
        spool.moved("body:a", [first.id], claimed=True)
        spool.add("body:b", "run_command", HELP_RUN)
        [b] = spool.pending()
        assert b.id == first.id  # the freed id came back
        spool.moved("body:a", [also.id], claimed=False)  # the second mover: its claim was refused, so it clears A
        assert [item.key for item in spool.pending()] == ["body:b"]
    finally:
        spool.close()



@dataclass
class RunningWorker:
    """A :class:`Worker` running on a thread, nudged as the answering process nudges it."""

    spool: Spool
    wake: int  # the nudge pipe's write end
    halt: int  # the stop pipe's write end (where a signal's wake-up byte lands)
    stop: threading.Event
    thread: threading.Thread

    def nudge(self) -> None:
        os.write(self.wake, b"w")

    def terminate(self) -> None:
        """What SIGTERM does: the handler sets ``stop``, and the signal's byte lands on the stop fd."""
        self.stop.set()
        os.write(self.halt, b"\x0f")


@contextmanager
def _running_worker(tmp_path: Path, dispatch: Callable[[object], None], **options: Any) -> Iterator[RunningWorker]:
    """A worker on a thread over a new SQLite database and spool (``options`` for :class:`Worker`), stopped after."""
    url = f"sqlite:///{tmp_path / 'kimi.db'}"
    schema.upgrade(url)
    ctx = build_context(load_settings(database_url=url, data_dir=tmp_path / "data"))
    spool = Spool(spool_path(tmp_path / "data"))
    (wake_read, wake_write), (stop_read, stop_write) = os.pipe(), os.pipe()
    for fd in (wake_read, stop_read):
        os.set_blocking(fd, False)
    stop = threading.Event()
    worker = Worker(ctx, dispatch, spool=spool, wake_fd=wake_read, stop_fd=stop_read, **options)
    running = RunningWorker(spool, wake_write, stop_write, stop, threading.Thread(target=worker.run, args=(stop,),
                                                                                  daemon=True))
    try:
        running.thread.start()
        yield running
    finally:
        running.terminate()
        running.thread.join(timeout=90)
        for fd in (wake_read, wake_write, stop_read, stop_write):
            os.close(fd)
        spool.close()
        ctx.close()


def _worker_beside_a_busy_front(tmp_path: Path, *, quiet: float, hold: float, nudging: float, requests: int = 1,
                                run_seconds: float = 0.0, pause_every: float = 0.0,
                                pause: float = 0.0) -> tuple[list[float], float]:
    """The answering process nudging the worker every 10 ms for ``nudging`` seconds (as it does when it acknowledges
    a request that often; silent for ``pause`` seconds at the end of every ``pause_every``), ``requests`` requests
    spooled among the first nudges. When the worker (one follow-up at a time, each ``run_seconds`` long) started
    each follow-up, and when the nudges stopped, in seconds from the first nudge."""
    runs: list[float] = []

    def run(request: object) -> None:
        runs.append(time.monotonic())
        time.sleep(run_seconds)

    with _running_worker(tmp_path, run, threads=1, quiet=quiet, hold=hold) as worker:
        first, spooled = time.monotonic(), False
        while (now := time.monotonic() - first) < nudging:
            if not pause_every or now % pause_every < pause_every - pause:
                worker.nudge()
            if not spooled and now > 0.1:
                # Among the others: had they come first, the worker, not yet nudged, could have taken them at once.
                for n in range(requests):
                    worker.spool.add(f"body:{n}", "run_command", HELP_RUN)
                spooled = True
            time.sleep(0.01)
        stopped = time.monotonic() - first
        _until(lambda: len(runs) == requests)
        return [at - first for at in runs], stopped


def test_the_worker_starts_no_follow_up_while_the_answering_process_keeps_acknowledging(tmp_path) -> None:
    """Requests arriving 10 ms apart for 1.5 s: the spooled follow-up starts once they stop, not among them (a
    follow-up's CPU would slow the acknowledgements that Slack waits at most 3 s for)."""
    [ran], stopped = _worker_beside_a_busy_front(tmp_path, quiet=0.5, hold=30.0, nudging=1.5)
    assert ran >= stopped, (ran, stopped)


def test_requests_that_never_stop_hold_the_follow_ups_for_a_bounded_time_only(tmp_path) -> None:
    """Requests that never stop arriving do not starve the follow-ups: past ``hold`` they run among them."""
    [ran], stopped = _worker_beside_a_busy_front(tmp_path, quiet=0.5, hold=0.5, nudging=2.5)
    assert 0.5 <= ran < stopped, (ran, stopped)


def test_short_pauses_between_requests_do_not_restart_the_hold(tmp_path) -> None:
    """Bursts of requests shorter than ``hold``, with pauses just past ``quiet`` between them: once held ``hold``, the
    worker runs its whole backlog among them. Were each pause to end the hold, the next burst would start a new one,
    and one follow-up or two would get through per pause (9 of the 20 in 4 s, measured so)."""
    runs, stopped = _worker_beside_a_busy_front(tmp_path, quiet=0.1, hold=1.0, nudging=4.0, requests=20,
                                                run_seconds=0.03, pause_every=0.75, pause=0.15)
    assert max(runs) < stopped, (runs, stopped)


def test_a_worker_asked_to_stop_while_holding_stops_at_once(tmp_path) -> None:
    """SIGTERM while the worker holds for the acknowledgements: it stops then, not after its idle poll."""
    with _running_worker(tmp_path, lambda request: None, quiet=5.0, hold=30.0, poll=60.0) as worker:
        worker.nudge()  # a request: the worker holds for 5 s of quiet
        time.sleep(0.3)
        worker.terminate()
        worker.thread.join(timeout=20)
        assert not worker.thread.is_alive(), "the worker slept out its idle poll before it stopped"
