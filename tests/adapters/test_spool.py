"""The replica's local spool (``bot/adapters/store/spool.py``): where a Slack job waits while the shared database
does not answer. A real SQLite file, written as the answering process and the worker write it."""

from __future__ import annotations

import sqlite3
import threading
import time

from bot.adapters.store.spool import Spool
from bot.slack.job import Job
from bot.slack.work import spool_path

# One recorded `/kimi help` job, as the answering process spools it.
HELP_JOB = Job("command", "body:help", "U0TYPIST", args={"command": "/kimi", "text": "help"}).as_json()


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
            spool.add(f"body:{n}", "run_command", HELP_JOB)
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
        spool.add("body:later", "run_command", HELP_JOB)  # the worker moved on: the spool takes work again
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
        spool.add("body:a", "run_command", HELP_JOB)
        [first] = spool.pending()
        [also] = spool.pending()  # the other mover's look
        spool.moved("body:a", [first.id], claimed=True)
        spool.add("body:b", "run_command", HELP_JOB)
        [b] = spool.pending()
        assert b.id == first.id  # the freed id came back
        spool.moved("body:a", [also.id], claimed=False)  # the second mover: its claim was refused, so it clears A
        assert [item.key for item in spool.pending()] == ["body:b"]
    finally:
        spool.close()
