"""The Slack app of one process: builds the Bolt app, its middleware and listeners, and owns the pools and the outbox thread.

One Bolt pass per request, with Bolt's public API only: ``process_before_response=True``, and every
acknowledgement function parses (pure, microseconds), builds the request's typed job
(:class:`bot.slack.job.Job`) and hands it to the process's intake (:mod:`bot.slack.intake`) as it acks. The
job's handler (:mod:`bot.slack.handlers`, no Bolt) resolves the person's groups, calls the command module (one
service call), posts its reply and delivers the outbox; the slow follow-up (the deployment engine, which may
watch a rollout for an hour) runs on a separate engine pool, so it never holds a thread that answers people.
Under ``kimi-ops serve`` the jobs are recorded in the shared database in the acknowledgement and run by a
separate worker process (``role="front"`` here, ``role="worker"`` there, built without Bolt:
:mod:`bot.slack.work`), so the acknowledgement never shares the interpreter with them.

At the edge: Bolt verifies signature and timestamp (forged or stale → 401);
:mod:`bot.slack.middleware.replay_guard` claims each request in the database
(a replay is refused, a redelivery of a request some replica took on is
acknowledged and dropped, one whose original was lost runs),
:mod:`bot.slack.middleware.unreadable` acknowledges a body Bolt cannot read,
:mod:`bot.slack.middleware.origin` refuses (and audits) a request from another
app, workspace or organisation, :mod:`bot.slack.middleware.shapes`
acknowledges what no listener could read or take (telling its sender in one
line) and refuses an over-long command unparsed, and
:mod:`bot.slack.middleware.metrics` counts and times every request. Whatever
still finds no listener is acknowledged 200 (Bolt would say 404), and an
exception is answered 200 by :mod:`bot.slack.listeners.errors` (Bolt would say
500): Slack shows either as "dispatch_failed".
"""

from __future__ import annotations

import functools
import gc
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from slack_bolt import BoltRequest, BoltResponse
from slack_sdk import WebClient

from bot.adapters.slack.identity import GroupDirectory, bot_identity
from bot.adapters.store.engine import bound_sqlite_waits
from bot.adapters.store.spool import Spool
from bot.bootstrap import Root
from bot.logs import logger_for
from bot.services.access import refuse_foreign_request
from bot.services.health import database_problems
from bot.slack.alert_webhook import PATH as WEBHOOK_PATH
from bot.slack.alert_webhook import webhook_app
from bot.slack.answers import sender_line, tell_sender
from bot.slack.bolt_log import bolt_logger
from bot.slack.deps import SlackDeps, person
from bot.slack.handlers import run_job
from bot.slack.home_cache import HomeCache
from bot.slack.http import Check, ReadinessProbe, WsgiApp, wsgi_app
from bot.slack.intake import DurableIntake, Intake, LocalIntake
from bot.slack.job import Job
from bot.slack.listeners import register_listeners
from bot.slack.middleware.metrics import MeteredApp, SlackMetrics
from bot.slack.middleware.origin import OnlyOurWorkspace, Origin, origin_of
from bot.slack.middleware.replay_guard import CLAIM_WAIT_SECONDS, OncePerReplica, OncePerRequest
from bot.slack.middleware.shapes import WellFormed
from bot.slack.middleware.unreadable import Unreadable, bolt_request
from bot.slack.outbox import Outbox
from bot.slack.pools import CountingExecutor
from bot.slack.work import spool_path
from bot.views.parts import set_bot_user

Role = Literal["inline", "front", "worker"]

NO_NOTIFIER = "the Slack app needs a root with a notifier: build it with build_root(ctx, slack_token=...)"
log = logger_for(__name__)


class KimiBolt(MeteredApp):
    """The metered Bolt app; the answering process notes, after each dispatch, what its copy guard let through."""

    after_dispatch: Callable[[BoltRequest], None] | None = None

    def dispatch(self, req: BoltRequest) -> BoltResponse:
        response = super().dispatch(req)
        if self.after_dispatch is not None:
            self.after_dispatch(req)
        return response


class KimiApp:
    """The Slack front end of one process; build it with :func:`create_app`."""

    def __init__(
        self, root: Root, bolt: KimiBolt | None, client: WebClient, workers: CountingExecutor, command: str,
        origin: Origin | None, role: Role = "inline", spool: Spool | None = None, wake_fd: int | None = None,
    ) -> None:
        if root.notifier is None:
            raise ValueError(NO_NOTIFIER)
        self.root = root
        self.ctx = ctx = root.ctx
        self.bolt = bolt
        self.client = client
        self.workers = workers
        self.slow = CountingExecutor(max_workers=workers.size, thread_name_prefix="kimi-engine")
        self.command = command
        directory = GroupDirectory(client, ctx.settings.roles.members)
        homes = HomeCache(ctx, client, functools.partial(person, directory))
        notifier = root.notifier
        notifier.on_delivered = homes.refresh_all  # the Homes opened on this replica follow what it delivers
        self.outbox = Outbox(notifier)
        self.deps = SlackDeps(root, client, directory, notifier, self.outbox, homes, self.slow)
        self._taking: set[int] = set()  # deployments a takeover handed to the engine pool, not yet returned
        self._takeover_stop = threading.Event()
        self.role = role
        # One answer per request across replicas, redeliveries included. The answering process of `serve` claims
        # each request in the shared database as it records its job (the intake), on the request thread where
        # SQLite bounds its own waits; a copy to the same replica is answered from its local memory first.
        inline = role == "front" and bound_sqlite_waits(ctx.uow.engine, CLAIM_WAIT_SECONDS)
        self.once = OncePerRequest(ctx, inline=inline)
        self.spool = spool
        self.intake: Intake | None = None
        if bolt is None or origin is None:  # the worker: it runs jobs verified, parsed and recorded elsewhere
            return
        self.metrics = bolt.metrics
        if role == "front" and spool is not None:
            self.intake = DurableIntake(ctx, spool, self.run_job, workers, self._tell_job, claim=self.once.first,
                                        wake_fd=wake_fd)
            guard = OncePerReplica(spool)
            bolt.use(guard)
            bolt.after_dispatch = guard.note_unspooled
        else:
            self.intake = LocalIntake(self.run_job, workers)
            bolt.use(self.once)
        bolt.use(Unreadable())
        bolt.use(OnlyOurWorkspace(origin, self._refused))
        bolt.use(WellFormed(ctx.settings.slack_max_command_chars, self._tell_sender))
        register_listeners(bolt, self.deps, self.intake, command)

    def run_job(self, job: Job) -> None:
        """Run one job through its handler, here (no Bolt); what escapes the handler is logged."""
        try:
            run_job(self.deps, job)
        except Exception:
            log.exception("a Slack job (%s) raised", job.kind)

    def _tell_job(self, job: Job, line: str) -> None:
        tell_sender(self.client, job.actor or None, job.channel, job.response_url, line)

    def _tell_sender(self, body: Mapping[str, Any], line: str) -> None:
        self.workers.submit(sender_line, self.client, body, line)  # off the acknowledgement path

    def _refused(self, user: str | None, kind: str, why: str, origin: dict[str, str | None]) -> None:
        refuse_foreign_request(self.ctx, user=user, kind=kind, why=why, origin=origin)

    def start_delivery(self, every_seconds: float) -> None:
        """Deliver the outbox periodically too: a rollout watch and the scheduled jobs write it while no request runs."""
        self.outbox.start(every_seconds, after=self.deps.homes.refresh_if_changed)

    def deliver(self) -> None:
        self.outbox.deliver()

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until no request work and no follow-up runs (the local shell prints after this)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = deadline - time.monotonic()
            if self.workers.wait_idle(left) and self.slow.wait_idle(max(0.0, deadline - time.monotonic())) \
                    and self.workers.wait_idle(0):
                return True
        return False

    def dispatch(self, body: bytes, headers: dict[str, Any], query: str = "") -> BoltResponse:
        """One Slack request through Bolt, as the HTTP adapter sends it (the local shell feeds its signed requests here)."""
        assert self.bolt is not None, "the worker answers no Slack request"
        return self.bolt.dispatch(bolt_request(body.decode("utf-8", errors="replace"), query, headers))

    def wsgi(self, path: str = "/slack/events", checks: tuple[Check, ...] = ()) -> WsgiApp:
        """The HTTP face; ``/readyz`` checks the database and schema, then ``checks`` (serve adds the Slack connection)."""
        probe = ReadinessProbe([functools.partial(database_problems, self.ctx), *checks])
        def deliver_soon() -> None:  # the pages an Alertmanager notification opened, at once and off its request
            self.workers.submit(self.deliver)

        alerts = webhook_app(self.ctx, after=deliver_soon)
        assert self.bolt is not None, "the worker answers no Slack request"
        return wsgi_app(self.bolt, self.metrics.registry, path, ready=probe, routes={WEBHOOK_PATH: alerts})

    def start_background(self) -> None:
        """After a restart: resume in-flight deployments and send what the outbox still holds."""
        def resume() -> None:
            try:
                self.root.engine.resume_all()
            finally:
                self.outbox.deliver()

        self.slow.submit(resume)
        threading.Thread(target=self._take_over, name="kimi-takeover", daemon=True).start()

    def _take_over(self) -> None:
        """Every replica, every few seconds: drive in-flight deployments whose lease lapsed, as a restart would."""
        engine = self.root.engine
        while not self._takeover_stop.wait(self.ctx.settings.lease_takeover_seconds):
            try:
                lapsed = engine.lapsed()
            except Exception:  # the database is away; the next round tries again
                log.warning("looking for lapsed deployment leases failed", exc_info=True)
                continue
            for deployment_id in lapsed:
                if deployment_id in self._taking:
                    continue
                log.info("taking over deployment #%s: its lease lapsed", deployment_id)
                self._taking.add(deployment_id)
                self.slow.submit(self._drive_taken, deployment_id)

    def _drive_taken(self, deployment_id: int) -> None:
        try:
            self.root.engine.resume(deployment_id)
        except Exception:
            log.exception("taking over deployment #%s failed", deployment_id)
        finally:
            self._taking.discard(deployment_id)
            self.outbox.deliver()

    def close(self) -> None:
        self._takeover_stop.set()
        self.once.close()
        if isinstance(self.intake, DurableIntake):
            self.intake.close()
        if self.spool is not None:
            self.spool.close()
        self.outbox.stop()
        self.root.engine.stop_all()
        self.workers.shutdown(wait=True, cancel_futures=True)
        self.slow.shutdown(wait=True, cancel_futures=True)


def freeze_start_up() -> None:
    """Put what the answering process built at start out of the cyclic garbage collector's reach (``gc.freeze``).

    After start-up it holds about 144,000 long-lived objects (the settings, SQLAlchemy's models, Bolt's app); a full
    collection walked them all, 100–150 ms with the interpreter held, and every acknowledgement in flight waited for
    it (the p99 at 50 clients). Frozen, a full collection walks only what came since. ``kimi-ops serve`` calls it
    once its app is built, before it answers; garbage made so far is collected first, not frozen.
    """
    gc.collect()
    gc.freeze()


def create_app(
    root: Root,
    *,
    signing_secret: str,
    command: str = "/kimi",
    workers: int = 16,
    outbox_seconds: float | None = 2.0,
    role: Role = "inline",
    wake_fd: int | None = None,
) -> KimiApp:
    """Build the Slack app on ``root``, sharing its notifier's Web API client.

    ``auth.test`` names the workspace, organisation and app requests must come from where the settings do not
    (:func:`bot.slack.middleware.origin.origin_of`; :class:`bot.config.ConfigError` when it cannot tell, and
    :class:`bot.adapters.slack.identity.SlackUnavailable` when Slack does not answer or refuses the token).

    ``role``: ``inline`` answers Slack and runs each job in this process (the local shell, tests); ``front``
    answers Slack and records each job in the shared database inside the acknowledgement (in the data directory's
    spool while that database does not answer), for a worker process nudged through ``wake_fd``, and keeps no
    outbox thread of its own; ``worker`` builds no Bolt app at all: it runs the recorded jobs
    (:mod:`bot.slack.work`), moving what waited in the spool into the shared database first.
    """
    if role == "front":
        outbox_seconds = None  # the worker delivers the outbox
    if root.notifier is None:
        raise ValueError(NO_NOTIFIER)
    client = root.notifier.client
    bot = bot_identity(client)
    set_bot_user(bot.user_id)  # what kimi-ops did itself is said with its bot user's mention (the worker says most)
    pool = CountingExecutor(max_workers=workers, thread_name_prefix="kimi-slack")
    spool = Spool(spool_path(root.ctx.settings.data_dir)) if role != "inline" else None
    bolt = None
    origin = None
    if role != "worker":
        origin = origin_of(root.ctx.settings, bot)
        bolt_log = bolt_logger()
        bolt = KimiBolt(
            metrics=SlackMetrics(),
            client=client,
            signing_secret=signing_secret,
            process_before_response=True,
            listener_executor=pool,
            # A request no listener takes goes to the error listener (listeners/errors.py), which answers 200:
            # Bolt's own answer would be 404, which Slack shows as an error.
            raise_error_for_unhandled_request=True,
            logger=bolt_log,
        )
    kimi = KimiApp(root, bolt, client, pool, command, origin, role, spool, wake_fd)
    if outbox_seconds:
        kimi.start_delivery(outbox_seconds)
    return kimi
