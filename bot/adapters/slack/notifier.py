"""Delivers the ``events`` outbox to Slack: deployment threads, gate messages, alerts.

Services write an event (:mod:`bot.domain.events`) in the same transaction as
the change it reports; this adapter reads them back (:mod:`bot.adapters.store.outbox`),
sends them afterwards, in order, through one handler per event class
(:attr:`SlackNotifier.HANDLERS`), and marks each delivered:

* ``deployment.requested`` posts the thread's root message in the endpoint's
  channel (or the channel the request came from) and keeps its ``ts``;
* ``deployment.state``, ``rollout.progress`` and ``admission.changed`` edit the
  deployment's one progress message in place (``progress:<id>``: the step, the
  time since it was requested, pods ready, the last event), posted in the thread
  the first time, and refresh the root's title: a deploy's thread is its root,
  one message per gate report and this one message;
* ``gate.waiting`` posts the check report with Approve/Reject buttons in the
  thread (the part that does not fit Slack's limits follows as replies);
* ``gate.decided`` updates that gate message in place: no buttons, who and when;
* a traffic gate message also offers "Accept proposed limits" while its
  proposal differs from the endpoint's limits; ``limits.accepted`` updates it
  in place to say who accepted which limits and when;
* a gate report with a plot gets it uploaded into the thread
  (``files_upload_v2``) by its own ``gate.plot`` event, written in the same
  transaction that records the gate message, so a failed upload is retried
  without posting the gate message twice;
* a channel notice (reservation and readiness alerts) goes to its channel, or
  the endpoint's;
* ``watch.alert`` posts a metrics-watch incident with the live release, the last
  deployment and Acknowledge / Silence… / Roll back buttons (nothing while its kind
  is silenced) and keeps its ``ts`` on the incident; ``watch.recovered`` replies in
  its thread (broadcast) and ``incident.handled`` edits it in place.

Every message is posted once, across replicas and retries (:meth:`SlackNotifier._post`):
each has a key (``deployment:<id>`` for a thread's root, ``gate:<id>`` for a gate
message, ``event:<id>`` for an event's reply or upload, ``…/<n>`` for overflow
pieces), claimed in ``slack_posts`` and committed before the Web API call, with
the message's ``ts`` committed right after it, each in a transaction of its own.
A retry finds the ``ts`` and posts nothing; a claim without one (the replica
died mid-call, or Slack's answer was lost) is looked up in Slack by the key the
message carries in its metadata before it is posted again. So nothing that
fails around a post (the database, a guard, a stop) makes it post twice, and
posts go out without slack_sdk's connection-error retries, which would resend a
message Slack may already have taken. Edits (``chat.update``) are idempotent.

Each event is delivered under a row lock (``SELECT … FOR UPDATE`` on
PostgreSQL), so replicas delivering at the same time wait for each other and
skip what the other sent, in the same order. Any failure (Slack, the database,
a bug) counts as an attempt and leaves the event (and the later events of the
same deployment) for the next pass; after ``MAX_ATTEMPTS`` it is given up and
logged.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler
from sqlalchemy.orm import Session

from bot.adapters.clock import Clock
from bot.adapters.slack.blocks import render, slack_text
from bot.adapters.store.models import Deployment, Event, GateResult, Incident
from bot.adapters.store.outbox import UnknownEvent, event_of
from bot.adapters.store.posts import PostClaim
from bot.adapters.store.uow import SqlUnitOfWork, UnitOfWorkFactory
from bot.config import EndpointSettings
from bot.domain.checks import GateReport
from bot.domain.events import (
    AdmissionChanged,
    ChannelNotice,
    DeploymentRequested,
    GateDecided,
    GatePlot,
    GateWaiting,
    IncidentHandled,
    LimitsAccepted,
    OutboxEvent,
    RampPlot,
    RampSplit,
    RolloutProgress,
    SloPlot,
    StateChanged,
    WatchAlert,
    WatchRecovered,
)
from bot.domain.limits import (
    LIMITS_ACCEPTED,
    LimitsAcceptance,
    find_acceptance,
    proposal_open,
)
from bot.domain.states import State
from bot.views.actions import GateTicket
from bot.views.deployments import PODS, deployment_title, progress_text, state_words
from bot.views.gates import decided_note, gate_parts, limits_parts, waiting_for
from bot.views.incidents import alert_parts
from bot.views.parts import Note, Part, Text, person
from bot.views.ramp import ramp_parts

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
Handler = Callable[["SlackNotifier", SqlUnitOfWork, Deployment, Any, str], None]
"""Delivers one event of a deployment whose thread exists; the last argument keys the event's own post."""
NoticeHandler = Callable[["SlackNotifier", SqlUnitOfWork, Any, str], None]
"""Delivers one event that belongs to no deployment (an alert for a channel)."""
# The metadata event type of every message the notifier posts; its payload's ``key`` finds the message again.
POST_EVENT_TYPE = "kimi_ops_post"
# How many pages (200 messages each) of a thread or channel a lookup reads before it posts again.
LOOKUP_PAGES = 5
# What a plot is called in the thread, per gate, after the endpoint and release (a file saved from Slack says whose).
PLOT_NAMES = {"traffic": "traffic-sweep.png", "model": "model-pass-rates.png"}


def plot_filename(endpoint: str, release: str, gate: str) -> str:
    """``kimi-prod-kimi-k3-2026-09-01-traffic-sweep.png``: the endpoint, the release, then what the plot shows."""
    return f"{endpoint}-{release}-{PLOT_NAMES.get(gate, f'{gate}-plot.png')}"
PLOT_TITLES = {"traffic": "latency and 429/error rate against concurrency, knee marked",
               "model": "pass rate per kind, this release beside production"}


def _session(uow: SqlUnitOfWork) -> Session:
    if uow.session is None:
        raise RuntimeError("the unit of work is not open")
    return uow.session


def _without_connection_retries(client: WebClient) -> WebClient:
    """``client`` for posts: a connection error may come after Slack took the message, so it is not resent blindly."""
    poster = copy.copy(client)
    poster.retry_handlers = [h for h in client.retry_handlers if not isinstance(h, ConnectionErrorRetryHandler)]
    return poster


def _key_of(message: dict[str, Any]) -> str | None:
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != POST_EVENT_TYPE:
        return None
    key = (metadata.get("event_payload") or {}).get("key")
    return str(key) if key is not None else None


def _error(exc: BaseException) -> str:
    return str(exc.response.get("error")) if isinstance(exc, SlackApiError) else f"{type(exc).__name__}: {exc}"


def _thread(channel: str | None, ts: str | None) -> tuple[str, str]:
    """Where a message already posted lives; callers reach here only after it was posted."""
    if channel is None or ts is None:
        raise RuntimeError("the Slack message has no channel or ts yet")
    return channel, ts


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
    ) -> None:
        self.client = client
        self.poster = _without_connection_retries(client)
        self.uow = uow
        self.clock = clock
        self.fallback_channel = fallback_channel
        self.on_delivered = on_delivered
        self._origins: dict[int, str] = {}
        self._state = threading.Lock()
        self._running = False
        self._wanted = False
        # Set when a delivery wrote a follow-up event (a plot upload), so the pass runs once more.
        self._spawned = False

    def remember_origin(self, deployment_id: int, channel: str | None) -> None:
        """The channel a request came from: the thread goes there when the endpoint names no channel."""
        if channel:
            with self._state:
                self._origins[deployment_id] = channel

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
        return sent, touched

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
            log.error("giving up on event %s (%s) after %s attempts: %s", event.id, event.kind, event.attempts, _error(exc),
                      exc_info=detail)
            event.delivered_at = self.clock.now()
        else:
            log.warning("event %s (%s) not delivered: %s", event.id, event.kind, _error(exc), exc_info=detail)
        uow.commit()
        return given_up

    # ------------------------------------------------------------------ one post, once
    def _post(self, key: str, channel: str, text: str, *, blocks: list[dict[str, Any]] | None = None,
              thread_ts: str | None = None, broadcast: bool = False) -> tuple[str, str]:
        """Post the message ``key`` names once, whatever fails around it: its channel and ``ts``."""
        extra: dict[str, Any] = {"thread_ts": thread_ts, "reply_broadcast": broadcast} if thread_ts else {}

        def send() -> tuple[str, str]:
            answer = self.poster.chat_postMessage(
                channel=channel, text=text, blocks=blocks,
                metadata={"event_type": POST_EVENT_TYPE, "event_payload": {"key": key}}, **extra,
            )
            return str(answer["channel"]), str(answer["ts"])

        return self._once(key, channel, thread_ts, lambda message: _key_of(message) == key, send)

    def _once(self, key: str, channel: str, thread_ts: str | None, earlier: Callable[[dict[str, Any]], bool],
              send: Callable[[], tuple[str, str]]) -> tuple[str, str]:
        """``send`` what ``key`` names unless it was sent before: where it went.

        The claim is committed before the call and where it went right after it, each on its own, so a delivery
        that fails later (or a replica that stops) leaves a record the retry reuses instead of sending again. A
        claim with no record (an earlier try died mid-call or lost Slack's answer) is looked for first: the
        message ``earlier`` recognises in the thread of ``thread_ts`` (else among the channel's newest).
        """
        claim = self._claim(key, channel)
        if claim.ts is not None:
            return claim.channel, claim.ts
        if not claim.first and (found := self._find(claim.channel, thread_ts, earlier)) is not None:
            self._record(key, claim.channel, found)
            return claim.channel, found
        try:
            sent = send()
        except SlackApiError:
            self._release(key)  # Slack answered no: nothing was sent, so the next try need not look for it
            raise
        self._record(key, *sent)
        return sent

    def _claim(self, key: str, channel: str) -> PostClaim:
        with self.uow() as uow:
            claim = uow.posts.claim(key, channel, self.clock.now())
            uow.commit()
            return claim

    def _record(self, key: str, channel: str, ts: str) -> None:
        with self.uow() as uow:
            uow.posts.record(key, channel, ts, self.clock.now())
            uow.commit()

    def _release(self, key: str) -> None:
        with self.uow() as uow:
            uow.posts.release(key)
            uow.commit()

    def _find(self, channel: str, thread_ts: str | None, match: Callable[[dict[str, Any]], bool]) -> str | None:
        """The ``ts`` of the message ``match`` picks in the thread of ``thread_ts`` (else among the channel's newest)."""
        cursor: str | None = None
        for _ in range(LOOKUP_PAGES):
            try:
                if thread_ts:
                    page = self.client.conversations_replies(channel=channel, ts=thread_ts, include_all_metadata=True,
                                                             limit=200, cursor=cursor)
                else:
                    page = self.client.conversations_history(channel=channel, include_all_metadata=True, limit=200,
                                                             cursor=cursor)
            except SlackApiError as exc:
                # Without channels:history / groups:history the message cannot be looked for: post it, maybe twice.
                log.warning("cannot look in %s for a message an earlier try may have posted (%s); posting it",
                            channel, _error(exc))
                return None
            for message in page.get("messages") or []:
                if match(message):
                    return str(message["ts"])
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if cursor is None:
                return None
        return None

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
        if not self._ensure_root(uow, dep):
            return
        handler = next((h for cls in type(event).__mro__ if (h := self.HANDLERS.get(cls)) is not None), None)
        if handler is not None:
            handler(self, uow, dep, event, key)

    def _notice(self, uow: SqlUnitOfWork, event: ChannelNotice, key: str) -> None:
        text = slack_text(event.text)
        channel = event.channel or self._endpoint_channel(uow, event.endpoint_name)
        if text and channel:
            self._post(key, channel, text, blocks=render([Text(text)]).blocks)
        elif text:
            log.warning("no channel for %s event; set the endpoint's channel", event.KIND)

    # ------------------------------------------------------------------ the metrics watch's incidents
    def _incident_parts(self, incident: Incident, text: str, context: dict[str, Any]) -> list[Part]:
        return alert_parts(text, incident.id, context, acknowledged_by=incident.acknowledged_by,
                           silenced_by=incident.silenced_by, silenced_until=incident.silenced_until,
                           silence_reason=incident.silence_reason, closed=not incident.open)

    def _watch_alert(self, uow: SqlUnitOfWork, event: WatchAlert, key: str) -> None:
        """The alert with what the endpoint runs and its buttons; a silenced kind is recorded, not posted."""
        incident = uow.incidents.get(event.incident_id)
        channel = event.channel or self._endpoint_channel(uow, event.endpoint_name)
        if event.silenced or incident is None:
            return
        if not channel:
            log.warning("no channel for %s event; set the endpoint's channel", event.KIND)
            return
        rendered = render(self._incident_parts(incident, slack_text(event.text), dict(event.context)))
        posted_channel, ts = self._post(key, channel, rendered.text, blocks=rendered.blocks)
        incident.slack_channel, incident.slack_ts = posted_channel, ts

    def _refresh_alert(self, uow: SqlUnitOfWork, incident: Incident) -> None:
        """Edit the alert message in place: who took it, a silence, recovered (no buttons)."""
        if not incident.slack_channel or not incident.slack_ts:
            return
        alert = next((e for e in uow.events.for_endpoint_kind(incident.endpoint_id, WatchAlert.KIND, incident.id)), None)
        text = slack_text(str(alert.payload.get("text", ""))) if alert is not None else incident.reason
        context = dict(alert.payload.get("context") or {}) if alert is not None else {}
        rendered = render(self._incident_parts(incident, text, context))
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
        self._post(key, channel, text, blocks=render([Text(text)]).blocks, thread_ts=incident.slack_ts,
                   broadcast=incident.slack_ts is not None)
        self._refresh_alert(uow, incident)

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
            self._post(key, channel, f"The objectives plot of `{event.endpoint_name}` is not available on this kimi-ops "
                                     "replica; `/kimi slo` again draws it anew.")
            return

        def upload() -> tuple[str, str]:
            answer = self.poster.files_upload_v2(channel=channel, file=data, filename=Path(event.path).name,
                                                 title=event.title, alt_txt=event.title)
            return channel, f"file:{(answer.get('files') or [{}])[0].get('id', '')}"

        self._once(key, channel, None, lambda message: any(f.get("title") == event.title
                                                          for f in message.get("files") or []), upload)

    def _requested(self, uow: SqlUnitOfWork, dep: Deployment, event: DeploymentRequested, key: str) -> None:
        """The root message is the whole announcement, and ``_ensure_root`` posted it."""

    def _progress(self, uow: SqlUnitOfWork, dep: Deployment, event: RolloutProgress, key: str) -> None:
        known = {s.value for s in State}
        self._show_progress(uow, dep, State(event.state) if event.state and event.state in known else None, event.message)

    def _ramp_split(self, uow: SqlUnitOfWork, dep: Deployment, event: RampSplit, key: str) -> None:
        """One message per ramp (key ``ramp:<deployment>``), posted once and edited in place by every later event."""
        service = ((dep.endpoint.settings or {}).get("pair") or {}).get("service")
        rendered = render(ramp_parts(event, service))
        channel, ts = self._reply(dep, f"ramp:{dep.id}", rendered.text, parts=ramp_parts(event, service))
        self.client.chat_update(channel=channel, ts=ts, text=rendered.text, blocks=rendered.blocks)

    def _ramp_plot(self, uow: SqlUnitOfWork, dep: Deployment, event: RampPlot, key: str) -> None:
        """The ramp's PNG into its thread, once; one not readable on this replica (or changed) becomes a note."""
        try:
            data: bytes | None = Path(event.path).read_bytes()
        except OSError:
            data = None
        if data is None or hashlib.sha256(data).hexdigest() != event.sha256:
            self._reply(dep, key, "The ramp's plot is not available on this kimi-ops replica; the ramp message above "
                                  "has its numbers.")
            return
        channel, thread_ts = _thread(dep.slack_channel, dep.slack_thread_ts)

        def upload() -> tuple[str, str]:
            answer = self.poster.files_upload_v2(channel=channel, thread_ts=thread_ts, file=data,
                                                 filename=Path(event.path).name, title=event.title, alt_txt=event.title)
            return channel, f"file:{(answer.get('files') or [{}])[0].get('id', '')}"

        self._once(key, channel, thread_ts, lambda message: any(f.get("title") == event.title
                                                                for f in message.get("files") or []), upload)

    def _thread_notice(self, uow: SqlUnitOfWork, dep: Deployment, event: ChannelNotice, key: str) -> None:
        if event.text:
            self._reply(dep, key, slack_text(event.text))

    def _admission_changed(self, uow: SqlUnitOfWork, dep: Deployment, event: AdmissionChanged, key: str) -> None:
        # Each ramp step changes admission: the progress message says it, the thread does not grow.
        self._show_progress(uow, dep, None, event.text)

    # ------------------------------------------------------------------ the one progress message
    def _show_progress(self, uow: SqlUnitOfWork, dep: Deployment, state: State | None, last: str | None) -> None:
        """Post the deployment's progress message once (``progress:<id>``), then edit it in place by its recorded ts."""
        step = state or State(dep.state)
        pods = self._pods_line(uow, dep) if not step.terminal else None
        rendered = render([Text(slack_text(progress_text(step, self.clock.now() - dep.created_at, pods, last)))])
        key = f"progress:{dep.id}"
        with self.uow() as posts:
            where = posts.posts.posted(key)
        if where is not None:
            self.client.chat_update(channel=where[0], ts=where[1], text=rendered.text, blocks=rendered.blocks)
            return
        channel, thread_ts = _thread(dep.slack_channel, dep.slack_thread_ts)
        self._post(key, channel, rendered.text, blocks=rendered.blocks, thread_ts=thread_ts)

    def _pods_line(self, uow: SqlUnitOfWork, dep: Deployment) -> str | None:
        """The newest thing the rollout watch said about ready pods or replicas, if it said any."""
        for event in reversed(list(uow.events.for_deployment(dep.id))):
            if event.kind == RolloutProgress.KIND:
                message = str((event.payload or {}).get("message") or "")
                if PODS.search(message):
                    return message
        return None

    def _endpoint_channel(self, uow: SqlUnitOfWork, name: str | None) -> str | None:
        row = uow.endpoints.get(name) if name else None
        return ((row.settings or {}).get("channel") if row else None) or self.fallback_channel

    def _root_text(self, dep: Deployment, state: str | None = None, reason: str | None = None) -> str:
        # The title follows the event being delivered, not the database (which may already be further on).
        state, reason = (state, reason) if state else (dep.state, dep.state_reason)
        return slack_text(deployment_title(dep.id, dep.kind, dep.release.name, dep.endpoint.name, state)
                          + f"\nrequested by {person(dep.requested_by)}" + (f"\n_{reason}_" if reason else ""))

    def _ensure_root(self, uow: SqlUnitOfWork, dep: Deployment) -> bool:
        if dep.slack_thread_ts:
            return True
        with self._state:
            origin = self._origins.get(dep.id)
        channel = (dep.endpoint.settings or {}).get("channel") or origin or self.fallback_channel
        if not channel:
            log.warning("no channel for deployment #%s; set the channel of endpoint %s", dep.id, dep.endpoint.name)
            return False
        text = self._root_text(dep)
        dep.slack_channel, dep.slack_thread_ts = self._post(f"deployment:{dep.id}", channel, text,
                                                            blocks=render([Text(text)]).blocks)
        return True

    def _reply(self, dep: Deployment, key: str, text: str, *, broadcast: bool = False,
               parts: list[Part] | None = None) -> tuple[str, str]:
        """Reply in the deployment's thread (what does not fit follows as replies keyed ``key/1``…): channel and ts."""
        rendered = render(parts or [Text(text)])
        channel, thread_ts = _thread(dep.slack_channel, dep.slack_thread_ts)
        posted = self._post(key, channel, rendered.text if parts else text, blocks=rendered.blocks, thread_ts=thread_ts,
                            broadcast=broadcast)
        for number, piece in enumerate(rendered.overflow, 1):
            self._post(f"{key}/{number}", channel, piece, thread_ts=thread_ts)
        return posted

    def _state_change(self, uow: SqlUnitOfWork, dep: Deployment, event: StateChanged, key: str) -> None:
        target, reason = State(event.to_state), event.reason
        self._show_progress(uow, dep, target, f"→ *{state_words(target)}*" + (f": {reason}" if reason else ""))
        self._update_root(dep, target, reason)
        if target == State.LIVE:
            # The release this one replaced is no longer live: its thread's title must say so too.
            for older in uow.deployments.in_states(dep.endpoint_id, [State.SUPERSEDED]):
                if older.slack_thread_ts and older.state_reason == f"superseded by deployment #{dep.id}":
                    self._update_root(older)

    def _update_root(self, dep: Deployment, state: str | None = None, reason: str | None = None) -> None:
        text = self._root_text(dep, state, reason)
        channel, ts = _thread(dep.slack_channel, dep.slack_thread_ts)
        self.client.chat_update(channel=channel, ts=ts, text=text, blocks=render([Text(text)]).blocks)

    def _gate_row(self, uow: SqlUnitOfWork, row_id: int | None) -> GateResult | None:
        return _session(uow).get(GateResult, row_id) if row_id else None

    def _acceptance(self, uow: SqlUnitOfWork, dep: Deployment, row: GateResult) -> LimitsAcceptance | None:
        return find_acceptance(uow.audit.actions(f"endpoint:{dep.endpoint.name}", LIMITS_ACCEPTED), dep.id, row.report_hash)

    def _limits(self, uow: SqlUnitOfWork, dep: Deployment, row: GateResult, report: GateReport) -> tuple[Part, ...]:
        """The accept-limits part of a traffic gate message, as things stand in the database now."""
        latest = uow.gates.latest(dep.id, "traffic")
        open_ = latest is not None and latest.id == row.id and proposal_open(dep.state)
        effective = EndpointSettings.model_validate(dep.endpoint.settings).effective_request_limits.model_dump(mode="json")
        ticket = GateTicket(dep.id, row.gate, row.report_hash, dep.release.tuple_hash) if open_ else None
        undecided = row.decision is None and not State(dep.state).terminal
        return limits_parts(report, effective=effective, acceptance=self._acceptance(uow, dep, row), ticket=ticket,
                            undecided=undecided)

    def _gate_message(self, uow: SqlUnitOfWork, dep: Deployment, row: GateResult) -> list[Part]:
        """A gate message as it should read now: buttons while undecided, who decided, the limits part."""
        report = GateReport.model_validate(row.report)
        waiting = row.decision is None and not State(dep.state).terminal
        ticket = GateTicket(dep.id, row.gate, row.report_hash, dep.release.tuple_hash) if waiting else None
        parts = list(gate_parts(report, deployment_id=dep.id, release=dep.release.name, endpoint=dep.endpoint.name,
                                kind=dep.kind, ticket=ticket))
        if waiting:
            parts.insert(1, Text(waiting_for(EndpointSettings.model_validate(dep.endpoint.settings), dep.requested_by)))
        elif row.decision and row.decided_by and row.decided_at:
            override = ((row.seen or {}).get("limits_override") or {}).get("reason")
            why = row.decision_reason or (f"above the measured limits: {override}" if override else None)
            parts.append(decided_note(row.decision, row.decided_by, row.decided_at, why))
        if row.gate == "traffic":
            parts += self._limits(uow, dep, row, report)
        return parts

    def _update_gate(self, uow: SqlUnitOfWork, row: GateResult, parts: list[Part]) -> None:
        rendered = render(parts)
        channel, ts = _thread(row.slack_channel, row.slack_ts)
        self.client.chat_update(channel=channel, ts=ts, text=rendered.text, blocks=rendered.blocks)

    def _gate_waiting(self, uow: SqlUnitOfWork, dep: Deployment, event: GateWaiting, key: str) -> None:
        row = self._gate_row(uow, event.gate_result_id)
        if row is None or row.slack_ts:
            return  # already posted (a redelivery), or the report is gone
        # Keyed by the gate result, not the event: one report is one message, whoever asks to post it.
        row.slack_channel, row.slack_ts = self._reply(dep, f"gate:{row.id}", "", parts=self._gate_message(uow, dep, row))
        if ((row.report.get("attachments") or {}).get("plot") or {}).get("path"):
            # Its own event, committed with the gate message's ts: a failed upload is retried alone.
            uow.events.emit(GatePlot(deployment_id=dep.id, endpoint_name=dep.endpoint.name, gate=row.gate, gate_result_id=row.id),
                            at=self.clock.now())
            with self._state:
                self._spawned = True
        uow.flush()
        for older in uow.gates.for_deployment(dep.id):
            if older.gate == row.gate and older.id < row.id and older.decision is None and older.slack_ts:
                # A re-check replaced this report: its buttons must not be pressed any more.
                old_report = GateReport.model_validate(older.report)
                stale = [*gate_parts(old_report, deployment_id=dep.id, release=dep.release.name, endpoint=dep.endpoint.name,
                                     kind=dep.kind),
                         Note(f"Re-checked at {row.checked_at:%Y-%m-%d %H:%M} UTC: the new report is further down the thread.")]
                if older.gate == "traffic":
                    stale += self._limits(uow, dep, older, old_report)  # no button now; who accepted it, if anyone did
                self._update_gate(uow, older, stale)

    def _gate_decided(self, uow: SqlUnitOfWork, dep: Deployment, event: GateDecided, key: str) -> None:
        row = self._gate_row(uow, event.gate_result_id)
        if row is None or not row.slack_ts:
            note = decided_note(event.decision, event.decided_by, event.decided_at, event.reason)
            self._reply(dep, key, slack_text(note.text))
            return
        self._update_gate(uow, row, self._gate_message(uow, dep, row))

    def _limits_accepted(self, uow: SqlUnitOfWork, dep: Deployment, event: LimitsAccepted, key: str) -> None:
        row = self._gate_row(uow, event.gate_result_id)
        if row is not None and row.slack_ts:
            self._update_gate(uow, row, self._gate_message(uow, dep, row))
            return
        # The gate message was never posted (no channel then): say it in the thread instead.
        accepted = event.accepted
        self._reply(dep, key, f"Limits accepted by {person(event.accepted_by)}: maxConcurrentRequests "
                         f"{accepted.get('max_concurrent_requests')}, maxQueueSize {accepted.get('max_queue_size')}")

    def _gate_plot(self, uow: SqlUnitOfWork, dep: Deployment, event: GatePlot, key: str) -> None:
        row = self._gate_row(uow, event.gate_result_id)
        plot = (((row.report if row else {}).get("attachments") or {}).get("plot")) or {}
        gate = event.gate or (row.gate if row else "gate")
        path = Path(str(plot.get("path", "")))
        try:
            data = path.read_bytes() if plot.get("path") else None
        except OSError:
            data = None
        if data is None or (plot.get("sha256") and hashlib.sha256(data).hexdigest() != plot["sha256"]):
            # Another replica ran the sweep, or the file was cleaned up: the table in the message has the numbers.
            log.warning("plot of the %s gate of deployment #%s is not readable at %s", gate, dep.id, path)
            self._reply(dep, key, f"The {gate} gate's plot is not available on this kimi-ops replica; "
                                  "the table above has the same numbers.")
            return
        channel, thread_ts = _thread(dep.slack_channel, dep.slack_thread_ts)
        title = f"{gate.capitalize()} gate · deployment #{dep.id}: {PLOT_TITLES.get(gate, 'plot')}"

        def upload() -> tuple[str, str]:
            answer = self.poster.files_upload_v2(
                channel=channel, thread_ts=thread_ts, file=data,
                filename=plot_filename(dep.endpoint.name, dep.release.name, gate),
                title=title, alt_txt=f"{gate} gate plot of deployment #{dep.id}: {PLOT_TITLES.get(gate, 'plot')}",
            )
            return channel, f"file:{(answer.get('files') or [{}])[0].get('id', '')}"  # a file's id, not a message ts

        # An upload carries no metadata: an earlier try's file is recognised by its title in the thread.
        self._once(key, channel, thread_ts, lambda message: any(f.get("title") == title for f in message.get("files") or []),
                   upload)

    # One handler per event class; a subclass without its own entry uses its nearest base's (every ChannelNotice).
    HANDLERS: ClassVar[dict[type[OutboxEvent], Handler]] = {
        DeploymentRequested: _requested,
        StateChanged: _state_change,
        GateWaiting: _gate_waiting,
        GateDecided: _gate_decided,
        LimitsAccepted: _limits_accepted,
        GatePlot: _gate_plot,
        RolloutProgress: _progress,
        AdmissionChanged: _admission_changed,
        RampSplit: _ramp_split,
        RampPlot: _ramp_plot,
        ChannelNotice: _thread_notice,
    }
    # Events with no deployment: one handler per class, the nearest base's otherwise (every ChannelNotice).
    NOTICE_HANDLERS: ClassVar[dict[type[OutboxEvent], NoticeHandler]] = {
        WatchAlert: _watch_alert,
        WatchRecovered: _watch_recovered,
        IncidentHandled: _incident_handled,
        SloPlot: _slo_plot,
        ChannelNotice: _notice,
    }
