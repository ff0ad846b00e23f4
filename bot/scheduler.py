"""The job scheduler: APScheduler 3 on the bot's own database, run by the elected leader only.

:class:`JobRunner` owns a ``BackgroundScheduler`` whose job store is
``SQLAlchemyJobStore`` on the same database as everything else (its
``apscheduler_jobs`` table is left out of our migrations). Jobs are stored as
textual references to module-level functions in ``jobs/`` with
``coalesce=True`` (a backlog runs once), ``max_instances=1`` and a misfire grace
time. Nothing starts at import: the bot (``kimi-ops serve``) or an operator
(``kimi-ops jobs start``) calls :meth:`JobRunner.start` and :meth:`JobRunner.stop`.

Every replica creates a runner, but its scheduler stays paused until the
replica wins leader election (:mod:`bot.adapters.leader`): a Kubernetes Lease in
a cluster, a PostgreSQL advisory lock otherwise, nobody else on SQLite. The
leader (re)registers the jobs, resumes, and keeps renewing; a replica that
loses leadership pauses. Jobs fetch the process's root (and so its Context)
from :mod:`bot.runtime`, which :meth:`JobRunner.start` installs.
"""

from __future__ import annotations

import datetime as dt
import threading

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import STATE_STOPPED
from apscheduler.triggers.interval import IntervalTrigger

from bot import runtime
from bot.adapters.leader import LeaderLock, leader_lock
from bot.bootstrap import Root
from bot.logs import logger_for
from bot.services.context import Context
from bot.services.scheduling import JOBS

log = logger_for(__name__)

MISFIRE_GRACE_SECONDS = 300
ELECTION_SECONDS = 10.0


class SharedEngineJobStore(SQLAlchemyJobStore):  # type: ignore[misc]  # apscheduler has no type information
    """The job store on the bot's own engine, which it must not dispose of when a scheduler shuts down."""

    def shutdown(self) -> None:
        return None  # the engine belongs to the Context; ``Context.close`` disposes of it


class StoppableScheduler(BackgroundScheduler):  # type: ignore[misc]  # apscheduler has no type information
    """A ``BackgroundScheduler`` that processes no job after ``shutdown``.

    APScheduler 3's main loop runs ``_process_jobs`` once more when ``shutdown``
    wakes it, with the executors already shut down: each due job then fails to
    be submitted, yet its stored next run time is advanced, so the run is lost
    for every replica. That pass happens whenever a paused scheduler stops
    (``kimi-ops jobs list`` reading the store, a standby replica stopping) and
    when the leader stops. Checking the state under the job-store lock, which
    ``shutdown`` takes before shutting the executors down, closes the window.
    """

    def _process_jobs(self) -> float | None:
        with self._jobstores_lock:
            if self.state == STATE_STOPPED:
                return None
            return super()._process_jobs()  # type: ignore[no-any-return]


def make_scheduler(ctx: Context) -> BackgroundScheduler:
    """A scheduler on the bot's database; not started."""
    return StoppableScheduler(
        jobstores={"default": SharedEngineJobStore(engine=ctx.uow.engine)},
        executors={"default": ThreadPoolExecutor(max_workers=len(JOBS))},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": MISFIRE_GRACE_SECONDS},
        timezone=dt.UTC,
    )


def next_runs(ctx: Context) -> dict[str, dt.datetime | None]:
    """Next run time of every stored job, read from the job store without running anything."""
    scheduler = make_scheduler(ctx)
    scheduler.start(paused=True)
    try:
        return {job.id: job.next_run_time for job in scheduler.get_jobs()}
    finally:
        scheduler.shutdown(wait=False)


class JobRunner:
    """Runs the scheduled jobs in this process while it is the elected leader."""

    def __init__(self, root: Root, lock: LeaderLock | None = None, *, election_seconds: float = ELECTION_SECONDS) -> None:
        self.root = root
        self.ctx = root.ctx
        self.lock = lock or leader_lock(root.ctx.uow.engine)
        self.election_seconds = election_seconds
        self.scheduler = make_scheduler(root.ctx)
        self.leading = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Install the root for jobs, start paused, and campaign for leadership (first round at once)."""
        runtime.install(self.root)
        self.scheduler.start(paused=True)
        self.elect_once()
        self._thread = threading.Thread(target=self._campaign, name="kimi-ops-leader", daemon=True)
        self._thread.start()
        log.info("scheduler started as %s (%s)", self.lock.identity, "leader" if self.leading else "standby")

    def stop(self) -> None:
        """Stop campaigning, let running jobs finish, give leadership up."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        if self.leading:
            self.lock.release()
            self.leading = False
        runtime.uninstall(self.root)
        log.info("scheduler stopped")

    def _campaign(self) -> None:
        while not self._stop.wait(self.election_seconds):
            self.elect_once()

    def elect_once(self) -> bool:
        """One round of the election: resume on winning, pause on losing."""
        try:
            leader = self.lock.acquire()
        except Exception as exc:  # cannot reach the lock's home: assume someone else may lead
            log.warning("leader election failed: %s", exc)
            leader = False
        if leader and not self.leading:
            self.ensure_jobs()
            self.scheduler.resume()
            self.leading = True
            log.info("%s leads: running scheduled jobs", self.lock.identity)
        elif not leader and self.leading:
            self.scheduler.pause()
            self.leading = False
            log.warning("%s lost leadership: jobs paused", self.lock.identity)
        return self.leading

    def ensure_jobs(self) -> None:
        """Store every job with its current period; keep the schedule of jobs already stored unchanged."""
        now = dt.datetime.now(dt.UTC)
        for spec in JOBS.values():
            interval = dt.timedelta(minutes=spec.period_minutes(self.ctx.settings))
            existing = self.scheduler.get_job(spec.name)
            same_trigger = existing is not None and getattr(existing.trigger, "interval", None) == interval
            if same_trigger and existing.func_ref == spec.func:
                continue  # a previous leader stored it: keep its next run, so a failover neither skips nor repeats
            self.scheduler.add_job(
                spec.func,
                trigger=IntervalTrigger(minutes=spec.period_minutes(self.ctx.settings), timezone=dt.UTC),
                id=spec.name,
                name=spec.description,
                replace_existing=True,
                next_run_time=now,  # a new or changed job runs once right away
            )
