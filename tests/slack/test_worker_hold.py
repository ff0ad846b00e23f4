"""The worker lets the acknowledgements pass: while requests keep arriving it starts no follow-up, for a bounded time.

A :class:`bot.slack.work.Worker` on a thread over a real SQLite database and spool, nudged through a real pipe as
the answering process nudges it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.adapters.store import schema
from bot.adapters.store.spool import Spool
from bot.bootstrap import build_context
from bot.config import load_settings
from bot.slack.work import Worker, spool_path
from tests.adapters.test_spool import HELP_JOB
from tests.world_support import wait_until


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
def _running_worker(tmp_path: Path, run: Callable[[str, dict[str, Any]], None], **options: Any) -> Iterator[RunningWorker]:
    """A worker on a thread over a new SQLite database and spool (``options`` for :class:`Worker`), stopped after."""
    url = f"sqlite:///{tmp_path / 'kimi.db'}"
    schema.upgrade(url)
    ctx = build_context(load_settings(database_url=url, data_dir=tmp_path / "data"))
    spool = Spool(spool_path(tmp_path / "data"))
    (wake_read, wake_write), (stop_read, stop_write) = os.pipe(), os.pipe()
    for fd in (wake_read, stop_read):
        os.set_blocking(fd, False)
    stop = threading.Event()
    worker = Worker(ctx, run, spool=spool, wake_fd=wake_read, stop_fd=stop_read, **options)
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

    def run(kind: str, job: dict[str, Any]) -> None:
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
                    worker.spool.add(f"body:{n}", "run_command", HELP_JOB)
                spooled = True
            time.sleep(0.01)
        stopped = time.monotonic() - first
        wait_until("every follow-up started", lambda: len(runs) == requests, timeout=30)
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
    with _running_worker(tmp_path, lambda kind, job: None, quiet=5.0, hold=30.0, poll=60.0) as worker:
        worker.nudge()  # a request: the worker holds for 5 s of quiet
        time.sleep(0.3)
        worker.terminate()
        worker.thread.join(timeout=20)
        assert not worker.thread.is_alive(), "the worker slept out its idle poll before it stopped"
