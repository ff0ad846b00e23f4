"""Delivers the ``events`` outbox to Slack: the pass over undelivered events, and the channel's alerts.

Services write an event (:mod:`bot.domain.events`) in the same transaction as
the change it reports; this adapter reads them back (:mod:`bot.adapters.store.outbox`),
sends them afterwards, in order, and marks each delivered. An event of a
deployment goes into its thread (:class:`~bot.adapters.slack.thread.DeploymentThread`:
root, progress message, gate messages, plots, ramp); one that belongs to no
deployment goes through one handler per event class (:attr:`SlackNotifier.NOTICE_HANDLERS`):

* a channel notice (reservation and readiness alerts) goes to its channel, or
  the endpoint's;
* ``watch.alert`` posts a metrics-watch incident with the live release, the last
  deployment and Acknowledge / Silence… / Roll back buttons (nothing while its kind
  is silenced) and keeps its ``ts`` on the incident; ``watch.recovered`` replies in
  its thread (broadcast) and ``incident.handled`` edits it in place;
* ``slo.plot`` uploads the objectives plot ``/kimi slo`` drew;
* ``alert_rules.not_applied`` outside a deployment replies under the message that moved the users (a service's
  rollback), else goes to the endpoint's channel.

Every message is posted once, across replicas and retries, by :class:`~bot.adapters.slack.once.PostOnce`;
what each message says comes from :mod:`bot.adapters.slack.messages`. Edits (``chat.update``) are idempotent.

Each event is delivered under a row lock (``SELECT … FOR UPDATE`` on
PostgreSQL), so replicas delivering at the same time wait for each other and
skip what the other sent, in the same order. Any failure (Slack, the database,
a bug) counts as an attempt and leaves the event (and the later events of the
same deployment) for the next pass; after ``MAX_ATTEMPTS`` it is given up and
logged. A post another try may still be sending (``PostInFlight``) is no
failure: the event waits for a later pass without counting an attempt.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from sqlalchemy.orm import Session

from bot.adapters.clock import Clock
from bot.adapters.slack.blocks import render, slack_text
from bot.adapters.slack.messages import incident_parts
from bot.adapters.slack.once import PostInFlight, PostOnce, slack_error
from bot.adapters.slack.thread import DeploymentThread
from bot.adapters.store.models import Event, Incident
from bot.adapters.store.outbox import UnknownEvent, event_of
from bot.adapters.store.uow import SqlUnitOfWork, UnitOfWorkFactory
from bot.domain.chat_text import literal
from bot.domain.events import (
    ChannelNotice,
    FailoverNotice,
    IncidentHandled,
    OutboxEvent,
    RulesNotApplied,
    SloPlot,
    WatchAlert,
    WatchRecovered,
)
from bot.logs import logger_for
from bot.views.parts import Text

log = logger_for(__name__)

MAX_ATTEMPTS = 5
NoticeHandler = Callable[["SlackNotifier", SqlUnitOfWork, Any, str], None]
"""Delivers one event that belongs to no deployment (an alert for a channel)."""


def _session(uow: SqlUnitOfWork) -> Session:
    if uow.session is None:
        raise RuntimeError("the unit of work is not open")
    return uow.session


class SlackNotifier:
    """Sends undelivered outbox events with a slack_sdk ``WebClient``."""

    def __init__(
        self,
        client: WebClient,
        uow: UnitOfWorkFactory,
        clock: Clock,
        *,
        fallback_channel: str | None = None,
        on_delivered: Callable[[set[str]], None] | None = None,
        plot_dir: Path | None = None,
    ) -> None:
        self.client = client
        self.posts = PostOnce(client, uow, clock)
        self.uow = uow
        self.clock = clock
        self.fallback_channel = fallback_channel
        self.on_delivered = on_delivered
        self._state = threading.Lock()
        self._running = False
        self._wanted = False
        # Set when a delivery wrote a follow-up event (a plot upload), so the pass runs once more.
        self._spawned = False
        self.thread = DeploymentThread(client, self.posts, clock, fallback_channel=fallback_channel,
                                       on_follow_up=self._follow_up, plot_dir=plot_dir)

    def remember_origin(self, deployment_id: int, channel: str | None) -> None:
        """The channel a request came from: the thread goes there when the endpoint names no channel."""
        self.thread.remember_origin(deployment_id, channel)

    def _follow_up(self) -> None:
        with self._state:
            self._spawned = True

    # ------------------------------------------------------------------ the loop
    def deliver_pending(self) -> int:
        """Send every undelivered event; concurrent callers coalesce into the running pass."""
        with self._state:
            self._wanted = True
            if self._running:
                return 0
            self._running = True
        total, touched = 0, set()
        try:
            while True:
                with self._state:
                    if not self._wanted:
                        self._running = False
                        break
                    self._wanted = False
                sent, endpoints = self._pass()
                self._flush_progress()
                total += sent
                touched |= endpoints
                with self._state:
                    if self._spawned:
                        self._spawned, self._wanted = False, True
        except BaseException:
            with self._state:
                self._running = False
            raise
        if touched and self.on_delivered is not None:
            self.on_delivered(touched)
        return total

    def _pass(self) -> tuple[int, set[str]]:
        with self.uow() as uow:
            ids = [e.id for e in uow.events.undelivered(limit=500)]
        sent, blocked, touched = 0, set(), set()
        for event_id in ids:
            with self.uow() as uow:
                event = _session(uow).get(Event, event_id, with_for_update=True)
                if event is None or event.delivered_at is not None or event.deployment_id in blocked:
                    continue
                deployment_id, endpoint_name = event.deployment_id, event.endpoint_name
                try:
                    self._deliver(uow, event, f"event:{event_id}")
                    event.delivered_at = self.clock.now()
                    event.attempts += 1
                    uow.commit()
                except PostInFlight as exc:
                    # Another replica is posting this event's message, or one it needs first (the thread's root):
                    # not a failed attempt. A later pass finds it posted, or takes the claim over and looks for it.
                    uow.rollback()
                    log.info("event %s waits: %s", event_id, exc)
                    if deployment_id is not None:
                        blocked.add(deployment_id)  # keep the thread in order
                    continue
                except Exception as exc:
                    # Slack said no or could not be reached, the database failed, a bug: what Slack took is in
                    # slack_posts already, so the retry posts nothing twice; every failure counts as an attempt.
                    uow.rollback()
                    if not self._failed(uow, event_id, exc) and deployment_id is not None:
                        blocked.add(deployment_id)  # keep the thread in order
                    continue
                if endpoint_name:
                    touched.add(endpoint_name)
                sent += 1
            if self.thread.progress_every <= 0:
                self._flush_progress()  # nothing coalesced (the console): each event's progress is shown
        return sent, touched

    def _flush_progress(self) -> None:
        """The progress messages and roots the pass changed, coalesced (a failure is retried after the next pass)."""
        try:
            with self.uow() as uow:
                self.thread.flush(uow)
        except Exception as exc:
            log.warning("progress messages not updated: %s", slack_error(exc),
                        exc_info=None if isinstance(exc, (SlackApiError, OSError)) else exc)

    def _failed(self, uow: SqlUnitOfWork, event_id: int, exc: Exception) -> bool:
        """Count a failed attempt at an event; ``True`` when it is given up (no later retry)."""
        event = _session(uow).get(Event, event_id, with_for_update=True, populate_existing=True)
        if event is None:
            return True
        event.attempts += 1
        # A Slack refusal or an unreachable Slack is routine; anything else gets its traceback in the log.
        detail = None if isinstance(exc, (SlackApiError, OSError)) else exc
        given_up = event.attempts >= MAX_ATTEMPTS
        if given_up:
            log.error("giving up on event %s (%s) after %s attempts: %s", event.id, event.kind, event.attempts, slack_error(exc),
                      exc_info=detail)
            event.delivered_at = self.clock.now()
        else:
            log.warning("event %s (%s) not delivered: %s", event.id, event.kind, slack_error(exc), exc_info=detail)
        uow.commit()
        return given_up

    # ------------------------------------------------------------------ one event
    def _deliver(self, uow: SqlUnitOfWork, row: Event, key: str) -> None:
        try:
            event = event_of(row)
        except UnknownEvent as exc:
            log.warning("event %s not delivered: %s", row.id, exc)
            return
        # What the delivery changes is written at its end: on SQLite an earlier write would hold the database's one
        # write lock while a post's claim, committed on its own connection, waits for it.
        with _session(uow).no_autoflush:
            self._dispatch(uow, event, key)

    def _dispatch(self, uow: SqlUnitOfWork, event: OutboxEvent, key: str) -> None:
        dep = uow.deployments.get(event.deployment_id) if event.deployment_id else None
        if dep is None:
            notice = next((n for cls in type(event).__mro__ if (n := self.NOTICE_HANDLERS.get(cls)) is not None), None)
            if notice is not None:
                notice(self, uow, event, key)
            return
        self.thread.deliver(uow, dep, event, key)

    def _notice(self, uow: SqlUnitOfWork, event: ChannelNotice, key: str) -> None:
        text = slack_text(event.text)
        channel = event.channel or self._endpoint_channel(uow, event.endpoint_name)
        if text and channel:
            self.posts.post(key, channel, text, blocks=render([Text(text)]).blocks)
        elif text:
            log.warning("no channel for %s event; set the endpoint's channel", event.KIND)

    # ------------------------------------------------------------------ the metrics watch's incidents
    def _watch_alert(self, uow: SqlUnitOfWork, event: WatchAlert, key: str) -> None:
        """The alert with what the endpoint runs and its buttons; a silenced kind is recorded, not posted."""
        incident = uow.incidents.get(event.incident_id)
        channel = event.channel or self._endpoint_channel(uow, event.endpoint_name)
        if event.silenced or incident is None:
            return
        if not channel:
            log.warning("no channel for %s event; set the endpoint's channel", event.KIND)
            return
        rendered = render(incident_parts(incident, slack_text(event.text), dict(event.context)))
        posted_channel, ts = self.posts.post(key, channel, rendered.text, blocks=rendered.blocks)
        incident.slack_channel, incident.slack_ts = posted_channel, ts

    def _refresh_alert(self, uow: SqlUnitOfWork, incident: Incident) -> None:
        """Edit the alert message in place: who took it, a silence, recovered (no buttons)."""
        if not incident.slack_channel or not incident.slack_ts:
            return
        alert = next((e for e in uow.events.for_endpoint_kind(incident.endpoint_id, WatchAlert.KIND, incident.id)), None)
        text = slack_text(str(alert.payload.get("text", ""))) if alert is not None else literal(incident.reason)
        context = dict(alert.payload.get("context") or {}) if alert is not None else {}
        rendered = render(incident_parts(incident, text, context))
        self.client.chat_update(channel=incident.slack_channel, ts=incident.slack_ts, text=rendered.text,
                                blocks=rendered.blocks)

    def _watch_recovered(self, uow: SqlUnitOfWork, event: WatchRecovered, key: str) -> None:
        incident = uow.incidents.get(event.incident_id)
        if event.silenced or incident is None:
            return
        channel = incident.slack_channel or event.channel or self._endpoint_channel(uow, event.endpoint_name)
        if not channel:
            return
        text = slack_text(event.text)
        self.posts.post(key, channel, text, blocks=render([Text(text)]).blocks, thread_ts=incident.slack_ts,
                        broadcast=incident.slack_ts is not None)
        self._refresh_alert(uow, incident)

    def _failover_notice(self, uow: SqlUnitOfWork, event: FailoverNotice, key: str) -> None:
        """In the thread of the alert that moved users (the channel when that alert has none)."""
        incident = uow.incidents.get(event.incident_id) if event.incident_id is not None else None
        channel = (incident.slack_channel if incident else None) or event.channel or self._endpoint_channel(
            uow, event.endpoint_name)
        if not channel:
            return
        text = slack_text(event.text)
        thread = incident.slack_ts if incident is not None else None
        self.posts.post(key, channel, text, blocks=render([Text(text)]).blocks, thread_ts=thread,
                        broadcast=thread is not None)

    def _rules_not_applied(self, uow: SqlUnitOfWork, event: RulesNotApplied, key: str) -> None:
        """Under the message that moved the users (a service's rollback), the endpoint's channel without one."""
        where = self.posts.posted(event.reply_to) if event.reply_to else None
        if where is None:
            self._notice(uow, event, key)
            return
        text = slack_text(event.text)
        self.posts.post(key, where[0], text, blocks=render([Text(text)]).blocks, thread_ts=where[1])

    def _incident_handled(self, uow: SqlUnitOfWork, event: IncidentHandled, key: str) -> None:
        incident = uow.incidents.get(event.incident_id)
        if incident is not None:
            self._refresh_alert(uow, incident)

    def _slo_plot(self, uow: SqlUnitOfWork, event: SloPlot, key: str) -> None:
        """Upload the PNG ``/kimi slo`` drew; one not readable on this replica (or changed) becomes a note."""
        channel = event.channel or self._endpoint_channel(uow, event.endpoint_name)
        if not channel:
            return
        try:
            data: bytes | None = Path(event.path).read_bytes()
        except OSError:
            data = None
        if data is None or hashlib.sha256(data).hexdigest() != event.sha256:
            self.posts.post(key, channel, f"The objectives plot of `{event.endpoint_name}` is not available on this kimi-ops "
                                      "replica; `/kimi slo` again draws it anew.")
            return
        self.posts.upload(key, channel, None, data, filename=Path(event.path).name, title=event.title)

    def _endpoint_channel(self, uow: SqlUnitOfWork, name: str | None) -> str | None:
        row = uow.endpoints.get(name) if name else None
        return ((row.settings or {}).get("channel") if row else None) or self.fallback_channel

    # Events with no deployment: one handler per class, the nearest base's otherwise (every ChannelNotice).
    NOTICE_HANDLERS: ClassVar[dict[type[OutboxEvent], NoticeHandler]] = {
        WatchAlert: _watch_alert,
        WatchRecovered: _watch_recovered,
        FailoverNotice: _failover_notice,
        RulesNotApplied: _rules_not_applied,
        IncidentHandled: _incident_handled,
        SloPlot: _slo_plot,
        ChannelNotice: _notice,
    }

