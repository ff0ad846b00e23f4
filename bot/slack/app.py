"""The Slack app of one process: builds the Bolt app, its middleware and listeners, and owns the pools and the outbox thread.

One sync execution model: Bolt with ``process_before_response=True`` and lazy
listeners. Every acknowledgement function only parses (pure, microseconds) and
acks, so Slack always has its answer well inside 3 seconds, over HTTP as over
Socket Mode; the lazy function, on Bolt's bounded worker pool, resolves the
person's groups, calls the command module (one service call), posts its reply
and delivers the outbox; the slow follow-up (the deployment engine, which may
watch a rollout for an hour) runs on a separate engine pool, so it never holds
a worker that answers people.

At the edge: Bolt verifies signature and timestamp (forged or stale → 401);
:mod:`bot.slack.middleware.replay_guard` claims each request in the database
(a replay is refused, a redelivery of a request some replica took on is
acknowledged and dropped, one whose original was lost runs), and
:mod:`bot.slack.middleware.metrics` counts and times every request.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from slack_bolt import BoltRequest, BoltResponse
from slack_sdk import WebClient

from bot.adapters.slack.identity import GroupDirectory
from bot.bootstrap import Root
from bot.services.health import database_problems
from bot.slack.deps import SlackDeps, person
from bot.slack.home_cache import HomeCache
from bot.slack.http import Check, ReadinessProbe, WsgiApp, wsgi_app
from bot.slack.listeners import register_listeners
from bot.slack.middleware.metrics import MeteredApp, SlackMetrics
from bot.slack.middleware.replay_guard import OncePerRequest
from bot.slack.outbox import Outbox
from bot.slack.pools import CountingExecutor

NO_NOTIFIER = "the Slack app needs a root with a notifier: build it with build_root(ctx, slack_token=...)"


class KimiApp:
    """The Slack front end of one process; build it with :func:`create_app`."""

    def __init__(self, root: Root, bolt: MeteredApp, client: WebClient, workers: CountingExecutor, command: str) -> None:
        if root.notifier is None:
            raise ValueError(NO_NOTIFIER)
        self.root = root
        self.ctx = ctx = root.ctx
        self.bolt = bolt
        self.client = client
        self.workers = workers
        self.slow = CountingExecutor(max_workers=workers.size, thread_name_prefix="kimi-engine")
        self.command = command
        self.metrics = bolt.metrics
        directory = GroupDirectory(client, ctx.settings.roles.members)
        homes = HomeCache(ctx, client, functools.partial(person, directory))
        notifier = root.notifier
        notifier.on_delivered = homes.refresh_all  # the Homes opened on this replica follow what it delivers
        self.outbox = Outbox(notifier)
        self.deps = SlackDeps(root, client, directory, notifier, self.outbox, homes, self.slow)
        self.once = OncePerRequest(ctx)  # one answer per request across replicas, redeliveries included
        bolt.use(self.once)
        register_listeners(bolt, self.deps, command)

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
        return self.bolt.dispatch(BoltRequest(body=body.decode("utf-8"), query=query, headers=headers))

    def wsgi(self, path: str = "/slack/events", checks: tuple[Check, ...] = ()) -> WsgiApp:
        """The HTTP face; ``/readyz`` checks the database and schema, then ``checks`` (serve adds the Slack connection)."""
        probe = ReadinessProbe([functools.partial(database_problems, self.ctx), *checks])
        return wsgi_app(self.bolt, self.metrics.registry, path, ready=probe)

    def start_background(self) -> None:
        """After a restart: resume in-flight deployments and send what the outbox still holds."""
        def resume() -> None:
            try:
                self.root.engine.resume_all()
            finally:
                self.outbox.deliver()

        self.slow.submit(resume)

    def close(self) -> None:
        self.once.close()
        self.outbox.stop()
        self.root.engine.stop_all()
        self.workers.shutdown(wait=True, cancel_futures=True)
        self.slow.shutdown(wait=True, cancel_futures=True)


def create_app(
    root: Root,
    *,
    signing_secret: str,
    command: str = "/kimi",
    workers: int = 16,
    outbox_seconds: float | None = 2.0,
) -> KimiApp:
    """Build the Slack app on ``root``, sharing its notifier's Web API client; ``auth.test`` is called once."""
    if root.notifier is None:
        raise ValueError(NO_NOTIFIER)
    client = root.notifier.client
    pool = CountingExecutor(max_workers=workers, thread_name_prefix="kimi-slack")
    bolt = MeteredApp(
        metrics=SlackMetrics(),
        client=client,
        signing_secret=signing_secret,
        process_before_response=True,
        listener_executor=pool,
        raise_error_for_unhandled_request=False,
        logger=logging.getLogger("kimi_ops.bolt"),
    )
    kimi = KimiApp(root, bolt, client, pool, command)
    if outbox_seconds:
        kimi.start_delivery(outbox_seconds)
    return kimi
