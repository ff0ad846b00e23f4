"""Where an acknowledged request's job goes before its answer leaves: the shared database, else this replica's spool.

An acknowledgement is a promise (issue 31): under ``kimi-ops serve`` the answering process records each job in the
shared database inside the acknowledgement (:class:`DurableIntake`: the request's claim across replicas and its
``slack_work`` row: one statement, :class:`bot.adapters.store.work.JobRecorder`), so a pod deleted, drained,
evicted or rescheduled right after answering loses nothing: any replica's worker takes the row. Only while that
database does not answer within :data:`bot.slack.middleware.replay_guard.CLAIM_WAIT_SECONDS` does the job wait in
the replica's local spool (:class:`bot.adapters.store.spool.Spool`), and then the acknowledgement says so plainly:
queued on this replica, to run when the database answers (the worker moves it there, and tells the person when it
ran). A job that needs the request's trigger (a form opens with it, within 3 s) runs at once in this process,
claimed first. The local shell and the tests' in-process app run every job here (:class:`LocalIntake`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Protocol

from slack_bolt import Ack

from bot.adapters.store.spool import Spool
from bot.adapters.store.work import JobRecorder
from bot.logs import logger_for
from bot.services.context import Context
from bot.slack.job import Job
from bot.slack.middleware.replay_guard import CLAIM_WAIT_SECONDS
from bot.slack.pools import CountingExecutor

log = logger_for(__name__)

Run = Callable[[Job], None]
Tell = Callable[[Job, str], None]  # one line to the job's actor, off the acknowledgement's thread


class Intake(Protocol):
    def submit(self, job: Job, ack: Ack, *, at_once: bool = False) -> None:
        """Take ``job`` on and acknowledge its request (``at_once``: it needs the trigger, so it starts here)."""


class LocalIntake:
    """Everything runs in this process, on its pool (the local shell, the tests' inline app)."""

    def __init__(self, run: Run, pool: CountingExecutor) -> None:
        self.run = run
        self.pool = pool

    def submit(self, job: Job, ack: Ack, *, at_once: bool = False) -> None:
        ack()
        self.pool.submit(self.run, job)


def queued_line(job: Job, replica: str) -> str:
    return (f"Queued on this replica ({replica}): the shared database is not answering, so {job.said_as()} will run "
            "when it answers; you will be told when it ran.")


class DurableIntake:
    """The answering process of ``kimi-ops serve``: the job in the shared database before the answer leaves."""

    def __init__(self, ctx: Context, spool: Spool, run_here: Run, pool: CountingExecutor, tell: Tell, *,
                 claim: Callable[[str], bool | None], wake_fd: int | None = None,
                 wait_seconds: float = CLAIM_WAIT_SECONDS) -> None:
        self.ctx = ctx
        self.spool = spool
        self.run_here = run_here
        self.pool = pool
        self.tell = tell
        self.claim = claim
        self.wake_fd = wake_fd
        self.wait_seconds = wait_seconds
        self.replica = os.uname().nodename
        # On PostgreSQL one writer thread records the jobs of concurrent acknowledgements together, each caller
        # waiting ``wait_seconds`` at most (a connection may hang); on SQLite the request's own thread records its
        # job, SQLite bounding its own waits (the app sets its busy timeout to the same bound).
        self.recorder = JobRecorder(ctx.uow.engine, wait_seconds)

    def submit(self, job: Job, ack: Ack, *, at_once: bool = False) -> None:
        if at_once:
            ack()
            if self.claim(job.key) is False:
                log.info("acknowledged and dropped a Slack request another delivery already took on")
                return
            self.pool.submit(self.run_here, job)
            return
        try:
            taken = self._record(job)
        except Exception as exc:  # the database is away or slow: the job waits on this replica, said plainly
            log.warning("the shared database did not take a Slack job (%s); queued in this replica's spool",
                        type(exc).__name__ or "timeout")
            self._queue_here(job, ack)
            return
        if not taken:
            log.info("acknowledged and dropped a Slack request another delivery already took on")
        ack()
        self.nudge()

    def _record(self, job: Job) -> bool:
        return self.recorder.record(job.key, job.kind, job.as_json(), self.ctx.clock.now())

    def _queue_here(self, job: Job, ack: Ack) -> None:
        queued = job.queued(time.time(), self.replica)
        try:
            self.spool.add(job.key, job.kind, queued.as_json())
        except Exception:  # neither the database nor the disk: the person still gets an answer, from here
            log.warning("could not spool a Slack job either; running it in the answering process", exc_info=True)
            ack()
            self.pool.submit(self.run_here, job)
            return
        line = queued_line(job, self.replica)
        if job.kind == "command":
            ack(text=line)
        else:
            ack()
            self.pool.submit(self.tell, job, line)
        self.nudge()

    def nudge(self) -> None:
        if self.wake_fd is not None:
            # A full pipe means the worker has nudges enough; a closed one, that it restarts and will look anyway.
            with contextlib.suppress(OSError):
                os.write(self.wake_fd, b"w")

    def close(self) -> None:
        self.recorder.close()
