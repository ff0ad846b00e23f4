"""``kimi-ops worker``: the process beside ``kimi-ops serve`` that runs what follows each Slack acknowledgement.

``serve`` answers Slack and spools each request's follow-up in the replica's local spool (:mod:`bot.slack.work`);
this process moves them into the shared database (claiming each request across replicas), takes them under a
lease and runs them (the command's service call, its reply, the engine's
steps), delivers the outbox, resumes and takes over deployments and, with ``--jobs``, runs the scheduled jobs.
``serve`` starts it with :class:`WorkerSupervisor` and starts it again when it dies; it is not meant to be run
by hand (hidden from ``--help``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import typer

from bot.cli.guard import run_guarded
from bot.logs import logger_for

log = logger_for(__name__)

OUTBOX_SECONDS = 5.0
RESTART_PAUSE_SECONDS = 1.0
RESTART_PAUSE_LIMIT = 30.0
WORKER_NICENESS = 5
# How long serve waits for its worker at SIGTERM: its running jobs, then its spool's drain (bot/slack/work.py,
# DRAIN_SECONDS 40 s, checked between attempts), plus one attempt in flight at that deadline (a silent database
# fails it in about 10 s: bot/adapters/store/engine.py); the pod's terminationGracePeriodSeconds (65 s, deploy/)
# covers it.
STOP_SECONDS = 55.0


def worker(
    jobs: bool = typer.Option(True, "--jobs/--no-jobs", help="Also run the scheduled jobs (with leader election)."),
    wake_fd: int = typer.Option(-1, "--wake-fd", help="Pipe the answering process nudges when it records work."),
    lease_seconds: float = typer.Option(0.0, "--lease-seconds", help="Lease of a taken follow-up (default 30 s)."),
    ready_fd: int = typer.Option(-1, "--ready-fd", help="Pipe told once this worker takes work (serve is ready then)."),
) -> None:
    """Run the follow-up work of `kimi-ops serve` (started by serve)."""
    from bot.bootstrap import build_root
    from bot.cli.common import context

    def body() -> None:
        ctx = context()
        settings = ctx.settings
        run_worker(build_root(ctx, slack_token=settings.slack_bot_token), jobs, wake_fd if wake_fd >= 0 else None,
                   lease_seconds or None, ready_fd if ready_fd >= 0 else None)

    run_guarded(body)


def run_worker(root: Any, jobs: bool, wake_fd: int | None, lease: float | None, ready_fd: int | None = None) -> None:
    from bot.slack.app import create_app
    from bot.slack.job import Job
    from bot.slack.work import LEASE_SECONDS, Worker

    settings = root.ctx.settings
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # first: a SIGTERM during start-up still drains the spool
    stop_read, stop_write = os.pipe()  # a signal's number lands here, so the waiting loop wakes to stop at once
    os.set_blocking(stop_write, False)
    signal.set_wakeup_fd(stop_write)
    # Below the answering process: when both want a core, the acknowledgement Slack waits for gets it first.
    os.nice(WORKER_NICENESS)
    kimi = create_app(root, signing_secret=settings.slack_signing_secret or "the-worker-verifies-nothing",
                      outbox_seconds=OUTBOX_SECONDS, role="worker")
    runner = None
    if jobs:
        from bot.scheduler import JobRunner

        runner = JobRunner(root)
        runner.start()
    kimi.start_background()
    if wake_fd is not None:
        os.set_blocking(wake_fd, False)
    work = Worker(root.ctx, lambda _kind, job: kimi.run_job(Job.from_json(job)), threads=kimi.workers.size,
                  lease=lease or LEASE_SECONDS, wake_fd=wake_fd, spool=kimi.spool, stop_fd=stop_read)
    log.info("worker %s takes follow-up work", work.holder)
    if ready_fd is not None:
        _say_ready(ready_fd)
    try:
        work.run(stop)
    except KeyboardInterrupt:
        pass
    finally:
        if runner is not None:
            runner.stop()
        kimi.close()


def _say_ready(ready_fd: int) -> None:
    """Tell serve this worker takes work: until then its ``/readyz`` says the worker is starting."""
    try:
        os.write(ready_fd, b"r")
    except OSError:  # serve is gone; the parent watch ends this process
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(ready_fd)



class WorkerSupervisor:
    """Starts ``kimi-ops worker`` beside the answering process and starts it again whenever it exits unasked."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.args = args
        self.env = {**os.environ, **(env or {})}  # the worker reads its settings as serve did, from the environment
        # The nudge pipe outlives each worker: a restarted one inherits the same read end.
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_write, False)
        self._stop = threading.Event()
        # Set while a worker that said it takes work runs; serve's readiness waits for it (the first answer after a
        # start or a restart would otherwise wait for the worker's start-up, seconds, while Slack's user waits).
        self.ready = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._keep, name="kimi-worker-supervisor", daemon=True)

    def command(self, ready_fd: int) -> list[str]:
        # The worker's first instruction ties it to this process (bot/cli/orphan_guard.py): a kill -9 of serve at
        # any moment, the worker's start-up included, takes the worker with it.
        first = f"from bot.cli.orphan_guard import die_with; die_with({os.getpid()})"
        return [sys.executable, "-c", f"{first}; from bot.cli.main import main; main()", "worker",
                "--wake-fd", str(self.wake_read), "--ready-fd", str(ready_fd), *self.args]

    def problems(self) -> list[str]:
        """A readiness check: nothing while a worker takes work."""
        return [] if self.ready.is_set() else ["the worker process is starting"]

    def _await_ready(self, ready_read: int) -> None:
        """Set :attr:`ready` when the worker writes to its ready pipe (end of file: it exited first)."""
        try:
            if os.read(ready_read, 1):
                self.ready.set()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(ready_read)

    def start(self) -> WorkerSupervisor:
        self._thread.start()
        return self

    def _keep(self) -> None:
        pause = RESTART_PAUSE_SECONDS / 2  # the first restart comes after RESTART_PAUSE_SECONDS
        while not self._stop.is_set():
            started = time.monotonic()
            ready_read, ready_write = os.pipe()
            try:
                self._proc = subprocess.Popen(self.command(ready_write), pass_fds=(self.wake_read, ready_write), env=self.env)
            finally:
                os.close(ready_write)  # the worker holds the only write end: its exit ends the wait below
            threading.Thread(target=self._await_ready, args=(ready_read,), name="kimi-worker-ready", daemon=True).start()
            code = self._proc.wait()
            self.ready.clear()
            if self._stop.is_set():
                return
            # A worker that dies at start (a bad setting) is not restarted in a tight loop: the pause doubles.
            pause = RESTART_PAUSE_SECONDS if time.monotonic() - started > RESTART_PAUSE_LIMIT else min(
                pause * 2, RESTART_PAUSE_LIMIT)
            log.error("the worker process exited (%s); starting another in %.0f s", code, pause)
            self._stop.wait(pause)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._thread.join(timeout=5)
        for fd in (self.wake_read, self.wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)


def register(app: typer.Typer) -> None:
    app.command("worker", hidden=True)(worker)
