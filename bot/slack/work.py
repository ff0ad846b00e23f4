"""The follow-up of a Slack request, run by a worker process instead of the process that answers Slack.

The answering process (``role="front"``) acknowledges each request and, instead of running its lazy listeners,
records each one as a follow-up in the database (:class:`FollowupQueue`: one small insert, committed before the
acknowledgement leaves) and nudges the worker through a pipe. The worker process (``kimi-ops worker``, started
and restarted by ``kimi-ops serve``: :mod:`bot.cli.worker`) builds the same Bolt app (``role="worker"``: no
signature check, since the request was verified before it was recorded, and no replay guard, since it was
claimed before) and :class:`Worker` runs each recorded request through it as Bolt runs a lazy listener on AWS
Lambda: ``lazy_only``, naming the function. So the SQL, the engine steps and the outbox deliveries that follow a
request never compete with the next acknowledgement for the interpreter.

A listener that opens a modal needs the request's ``trigger_id``, which Slack honours for 3 seconds only; those
(:data:`IMMEDIATE`, and a request whose acknowledgement set :data:`RUN_HERE`: a slash command that answers with
a form) still run at once in the answering process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import uuid
from collections.abc import Callable
from typing import Any

from slack_bolt import BoltRequest

from bot.services import followups
from bot.services.context import Context
from bot.slack.middleware.unreadable import read_as_form

log = logging.getLogger("kimi_ops.slack")

# Lazy listeners that call views.open with the click's trigger_id (valid 3 s): never queued.
IMMEDIATE = frozenset({"ask_reason", "ask_override", "ask_silence"})
RUN_HERE = "kimi_run_here"  # a Bolt context key an acknowledgement sets when this request's lazy work needs its trigger
LEASE_SECONDS = 30.0  # a dead worker's follow-up is taken again after this
POLL_SECONDS = 2.0  # how often an idle worker looks without a nudge (another replica's work, a lapsed lease)


class FollowupQueue:
    """The answering process's side: record a lazy listener's run for the worker, then nudge it."""

    def __init__(self, ctx: Context, wake_fd: int | None = None) -> None:
        self.ctx = ctx
        self.wake_fd = wake_fd

    def record(self, function: str, request: BoltRequest) -> None:
        body: Any = request.raw_body if request.mode == "http" else request.body
        followups.record(self.ctx, function, {"mode": request.mode, "body": body, "query": dict(request.query),
                                              "headers": {k: list(v) for k, v in request.headers.items()}})
        if self.wake_fd is not None:
            # A full pipe means the worker has nudges enough; a closed one, that it restarts and will look anyway.
            with contextlib.suppress(OSError):
                os.write(self.wake_fd, b"w")


def rebuilt(function: str, request: dict[str, Any]) -> BoltRequest:
    """The recorded request, as Bolt hands a lazy listener its own run of it."""
    bolt = read_as_form(BoltRequest(body=request["body"], query=request.get("query") or {},
                                    headers=request.get("headers") or {}, mode=request.get("mode") or "http"))
    bolt.lazy_only = True
    bolt.lazy_function_name = function
    return bolt


class Worker:
    """The worker process's loop: take follow-ups under a lease, run each through ``dispatch``, renew, finish."""

    def __init__(self, ctx: Context, dispatch: Callable[[BoltRequest], object], *, threads: int = 8,
                 lease: float = LEASE_SECONDS, poll: float = POLL_SECONDS, wake_fd: int | None = None) -> None:
        self.ctx = ctx
        self.dispatch = dispatch
        self.lease = lease
        self.poll = poll
        self.wake_fd = wake_fd
        self.holder = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._slots = threading.BoundedSemaphore(threads)
        self._held: set[int] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def run(self, stop: threading.Event) -> None:
        """Until ``stop``: take what is free while a thread is, else wait for a nudge or the poll."""
        renewer = threading.Thread(target=self._renew, args=(stop,), name="kimi-followup-lease", daemon=True)
        renewer.start()
        while not stop.is_set():
            if not self._slots.acquire(timeout=self.poll):
                continue
            try:
                item = followups.take(self.ctx, self.holder, self.lease)
            except Exception:
                log.warning("could not look for follow-up work; trying again", exc_info=True)
                item = None
            if item is None:
                self._slots.release()
                self._wait(stop)
                continue
            with self._lock:
                self._held.add(item.id)
            thread = threading.Thread(target=self._run_one, args=(item,), name=f"kimi-followup-{item.id}", daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()
        for thread in self._threads:
            thread.join(timeout=30)

    def _wait(self, stop: threading.Event) -> None:
        if self.wake_fd is None:
            stop.wait(self.poll)
            return
        ready, _, _ = select.select([self.wake_fd], [], [], self.poll)
        if ready:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                os.read(self.wake_fd, 4096)  # every nudge so far: one look takes everything that waits

    def _run_one(self, item: followups.Followup) -> None:
        try:
            if item.attempts > 1:
                log.info("running follow-up #%s again (%s): its earlier worker stopped", item.id, item.function)
            self.dispatch(rebuilt(item.function, item.request))
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
