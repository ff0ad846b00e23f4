"""The worker process's loop: the jobs that follow Slack's acknowledgements, run beside the process that answers.

The answering process (``role="front"``, :mod:`bot.slack.intake`) records each request's typed job
(:class:`bot.slack.job.Job`) in the shared database inside the acknowledgement, the request's claim across
replicas and its ``slack_work`` row in one transaction, and nudges the worker through a pipe; only while that
database does not answer does a job wait in the replica's local spool file instead. The worker process
(``kimi-ops worker``, started and restarted by ``kimi-ops serve``: :mod:`bot.cli.worker`) moves spooled jobs into
the shared database (:meth:`Worker.move`: claim and row in one transaction, then off the spool), takes jobs
under a lease and runs each through its handler (:func:`bot.slack.handlers.run_job`), without Bolt. So the SQL,
the engine steps and the outbox deliveries that follow a request never compete with the next acknowledgement
for the interpreter. Asked to stop (SIGTERM), it takes no new job, lets the running ones finish and moves what
is left in the spool into the shared database before it exits (:meth:`Worker.drain`), so a pod whose data
directory goes with it loses nothing it acknowledged.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.adapters.store.spool import Spool, SpooledItem
from bot.logs import logger_for
from bot.services import followups
from bot.services.context import Context
from bot.services.deliveries import forget_old_deliveries
from bot.slack.middleware.replay_guard import PURGE_EVERY_SECONDS

log = logger_for(__name__)

LEASE_SECONDS = 30.0  # a dead worker's follow-up is taken again after this
POLL_SECONDS = 2.0  # how often an idle worker looks without a nudge (another replica's work, a lapsed lease)
# While requests keep arriving (nudges less than QUIET_SECONDS apart) the worker lets the acknowledgements pass
# before it starts more follow-ups, for HOLD_SECONDS at most between two moments it has caught up: Slack's 3 s for
# the acknowledgement is a hard limit, the follow-up's reply is not, and a follow-up costs 10 to 50 times an
# acknowledgement's CPU on the same cores.
QUIET_SECONDS = 0.02
HOLD_SECONDS = 2.0
# At SIGTERM the spool is moved into the shared database, trying this long while it does not answer; `serve`
# waits a little longer for its worker, and the pod's terminationGracePeriodSeconds covers both (deploy/).
DRAIN_SECONDS = 40.0
DRAIN_RETRY_SECONDS = 0.5


def spool_path(data_dir: Path) -> Path:
    """This replica's spool file: its answering process and its worker share it, other replicas have their own."""
    return data_dir / "slack-spool.sqlite"


class Worker:
    """The worker process's loop: take jobs under a lease, run each through ``run`` (kind, job), renew, finish."""

    def __init__(self, ctx: Context, run: Callable[[str, dict[str, Any]], object], *, threads: int = 8,
                 lease: float = LEASE_SECONDS, poll: float = POLL_SECONDS, wake_fd: int | None = None,
                 spool: Spool | None = None, stop_fd: int | None = None, quiet: float = QUIET_SECONDS,
                 hold: float = HOLD_SECONDS) -> None:
        self.ctx = ctx
        self.spool = spool
        self.run_job = run
        self.lease = lease
        self.poll = poll
        self.wake_fd = wake_fd
        self.stop_fd = stop_fd  # readable once a signal asks the process to stop (``signal.set_wakeup_fd``)
        self.holder = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._slots = threading.BoundedSemaphore(threads)
        self._held: set[int] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._purged_at: float | None = None
        self.quiet = quiet
        self.hold = hold
        self._nudged_at: float | None = None  # the last nudge read (a request the answering process just spooled)
        self._busy_since: float | None = None  # when holding began since the worker last caught up
        self._stop: threading.Event | None = None

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` (or the server's end): take what is free while a thread is, else wait for a nudge or the poll."""
        self._stop = stop
        renewer = threading.Thread(target=self._renew, args=(stop,), name="kimi-followup-lease", daemon=True)
        renewer.start()
        while not stop.is_set():
            self._let_acknowledgements_pass(stop)
            if stop.is_set():  # the signal's byte on the stop fd was read while holding: _wait would not wake
                break
            self.move()
            if not self._slots.acquire(timeout=self.poll):
                continue
            try:
                item = followups.take(self.ctx, self.holder, self.lease)
            except Exception:
                log.warning("could not look for follow-up work; trying again", exc_info=True)
                item = None
            if item is None:
                self._slots.release()
                self._busy_since = None  # caught up: the next busy spell may be held again
                self._wait(stop)
                continue
            with self._lock:
                self._held.add(item.id)
            thread = threading.Thread(target=self._run_one, args=(item,), name=f"kimi-followup-{item.id}", daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()
        for thread in self._threads:
            thread.join(timeout=30)
        self.drain()

    def drain(self, seconds: float = DRAIN_SECONDS) -> bool:
        """Move everything still in the spool into the shared database, trying for ``seconds`` while it does not
        answer; ``True`` once the spool is empty (the jobs there were acknowledged: they must not stay with the pod)."""
        if self.spool is None:
            return True
        deadline = time.monotonic() + seconds
        while True:
            self.move()
            try:
                left = self.spool.waiting()
            except Exception:
                left = -1
            if left == 0:
                return True
            if time.monotonic() > deadline:
                log.error("%s acknowledged Slack job(s) are still in this replica's spool after %.0f s of draining; "
                          "the shared database did not take them", left, seconds)
                return False
            time.sleep(DRAIN_RETRY_SECONDS)

    def move(self) -> None:
        """Take this replica's spooled runs into the shared database, request by request, then off the spool.

        Each request is claimed across replicas and its runs recorded in one transaction
        (:func:`bot.services.followups.accept`); a request another replica (or an earlier delivery) claimed is
        dropped here. Runs leave the spool only after that commit: a worker killed in between leaves them, and
        the next worker's claim of the same request is refused, so they run once.
        """
        if self.spool is None:
            return
        self._forget_old_claims()
        try:
            items = self.spool.pending()
        except Exception:
            log.warning("could not read the spool; trying again", exc_info=True)
            return
        requests: dict[str, list[SpooledItem]] = {}
        for item in items:
            requests.setdefault(item.key, []).append(item)
        for key, runs in requests.items():
            try:
                taken = followups.accept(self.ctx, key, [(r.function, r.request) for r in runs],
                                         claimed=runs[0].claimed)
            except Exception:  # the database is away: the runs stay spooled for the next look
                log.warning("could not take spooled Slack work into the database; trying again", exc_info=True)
                return
            if not taken:
                log.info("acknowledged and dropped a Slack request another delivery already took on")
            try:
                # Off the spool; if taken, a run of the same request spooled after this look needs no claim (its
                # own would lose): both in one local commit.
                self.spool.moved(key, [r.id for r in runs], claimed=taken)
            except Exception:  # left spooled: the next look's claim is refused, so they are not recorded twice
                log.warning("could not clear moved Slack work from the spool", exc_info=True)
                return

    def _forget_old_claims(self) -> None:
        # The claims are this worker's to make, so forgetting the old ones (no copy can still come) is too.
        now = time.monotonic()
        if self._purged_at is not None and now - self._purged_at < PURGE_EVERY_SECONDS:
            return
        self._purged_at = now
        try:
            forget_old_deliveries(self.ctx)
        except Exception as exc:  # the next purge catches up
            log.warning("could not forget old Slack deliveries (%s)", type(exc).__name__)

    def _wait(self, stop: threading.Event) -> None:
        if stop.is_set():
            return
        if self.wake_fd is None:
            stop.wait(self.poll)
            return
        self._read_nudges(self.poll)

    def _read_nudges(self, timeout: float) -> None:
        """Wait up to ``timeout`` for a nudge (or the stop fd), then read every nudge so far."""
        if self.wake_fd is None:
            return
        # A signal interrupts select(), which then sleeps out the rest of its timeout (PEP 475): the stop fd is
        # what wakes it when the process is asked to stop.
        ready, _, _ = select.select([self.wake_fd] + ([self.stop_fd] if self.stop_fd is not None else []), [], [],
                                    timeout)
        for fd in ready:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                read = os.read(fd, 4096)
                if read and fd == self.wake_fd:  # every nudge so far: one look takes all that waits
                    self._nudged_at = time.monotonic()
                elif not read and fd == self.wake_fd:
                    # End of file: no process holds the pipe's write end, so the server is gone. Reading it again
                    # would return at once, for ever (a core at 100%): stop instead.
                    log.error("the serving process is gone (its nudge pipe closed); the worker stops")
                    self.wake_fd = None
                    if self._stop is not None:
                        self._stop.set()

    def _let_acknowledgements_pass(self, stop: threading.Event) -> None:
        """While the answering process is busy acknowledging (nudges keep coming), start no follow-up.

        Holding is bounded: once the worker has held ``hold`` since it last caught up (nothing left to take), it
        runs its backlog without holding, requests or not, until it catches up again; so a follow-up waits at most
        ``hold`` for the acknowledgements, however the requests come. The follow-ups already running go on; a
        request that arrives alone waits ``quiet`` before its follow-up starts.
        """
        if self.wake_fd is None or self.quiet <= 0:
            return
        self._read_nudges(0)
        while not stop.is_set() and self._nudged_at is not None and (now := time.monotonic()) - self._nudged_at < self.quiet:
            if self._busy_since is None:
                self._busy_since = now
            if now - self._busy_since >= self.hold:
                return
            # A sleep, not a wait for the next nudge: the answering process nudges once per request.
            stop.wait(min(self.quiet, self._busy_since + self.hold - now))
            self._read_nudges(0)

    def _run_one(self, item: followups.Followup) -> None:
        try:
            if item.attempts > 1:
                log.info("running follow-up #%s again (%s): its earlier worker stopped", item.id, item.function)
            self.run_job(item.function, item.request)
        except Exception:  # the listeners answer their own errors; whatever escapes is logged, not retried forever
            log.exception("follow-up #%s (%s) raised", item.id, item.function)
        finally:
            with self._lock:
                self._held.discard(item.id)
            try:
                if not followups.finish(self.ctx, self.holder, item.id):
                    log.warning("follow-up #%s outlived its lease and was taken again", item.id)
            except Exception:
                log.warning("could not mark follow-up #%s done; it runs again after its lease", item.id, exc_info=True)
            self._slots.release()

    def _renew(self, stop: threading.Event) -> None:
        while not stop.wait(self.lease / 3):
            with self._lock:
                held = sorted(self._held)
            try:
                followups.renew(self.ctx, self.holder, held, self.lease)
            except Exception:
                log.warning("could not renew follow-up leases", exc_info=True)
