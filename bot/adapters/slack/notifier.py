"""Delivers the ``events`` outbox to Slack: deployment threads, gate messages, alerts.

Services write an event in the same transaction as the change it reports; this
adapter sends them afterwards, in order, and marks each delivered:

* ``deployment.requested`` posts the thread's root message in the endpoint's
  channel (or the channel the request came from) and keeps its ``ts``;
* ``deployment.state`` and ``rollout.progress`` reply in the thread (terminal
  states are also broadcast to the channel) and refresh the root's title;
* ``gate.waiting`` posts the check report with Approve/Reject buttons in the
  thread (the part that does not fit Slack's limits follows as replies);
* ``gate.decided`` updates that gate message in place: no buttons, who and when;
* anything with a ``text`` (reservation and readiness alerts) goes to the
  endpoint's channel.

Delivery is idempotent where Slack lets it be: a root or gate message already
recorded is never posted again. Each event is delivered under a row lock
(``SELECT … FOR UPDATE`` on PostgreSQL), so replicas delivering at the same
time wait for each other and skip what the other sent, in the same order. A failure leaves the event (and the later
events of the same deployment) for the next pass; after ``MAX_ATTEMPTS`` it is
given up and logged.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.adapters.clock import Clock
from bot.adapters.slack.blocks import render
from bot.adapters.store.models import Deployment, Event, GateResult
from bot.adapters.store.uow import SqlUnitOfWork, UnitOfWorkFactory
from bot.domain.checks import GateReport
from bot.domain.messages import (
    GateTicket,
    Note,
    Part,
    Text,
    decided_note,
    deployment_title,
    gate_parts,
    state_words,
)
from bot.domain.states import TERMINAL

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5


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
        self.uow = uow
        self.clock = clock
        self.fallback_channel = fallback_channel
        self.on_delivered = on_delivered
        self._origins: dict[int, str] = {}
        self._state = threading.Lock()
        self._running = False
        self._wanted = False

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
                event = uow.session.get(Event, event_id, with_for_update=True)
                if event is None or event.delivered_at is not None or event.deployment_id in blocked:
                    continue
                try:
                    self._deliver(uow, event)
                except SlackApiError as exc:
                    uow.rollback()
                    event = uow.session.get(Event, event_id, with_for_update=True)
                    event.attempts += 1
                    error = exc.response.get("error")
                    if event.attempts >= MAX_ATTEMPTS:
                        log.error("giving up on event %s (%s) after %s attempts: %s", event.id, event.kind, event.attempts, error)
                        event.delivered_at = self.clock.now()
                    else:
                        log.warning("event %s (%s) not delivered: %s", event.id, event.kind, error)
                        if event.deployment_id is not None:
                            blocked.add(event.deployment_id)  # keep the thread in order
                    uow.commit()
                    continue
                event.delivered_at = self.clock.now()
                event.attempts += 1
                if event.endpoint_name:
                    touched.add(event.endpoint_name)
                uow.commit()
                sent += 1
        return sent, touched

    # ------------------------------------------------------------------ one event
    def _deliver(self, uow: SqlUnitOfWork, event: Event) -> None:
        payload = event.payload or {}
        dep = uow.deployments.get(event.deployment_id) if event.deployment_id else None
        if dep is None:
            text = payload.get("text")
            channel = payload.get("channel") or self._endpoint_channel(uow, event.endpoint_name)
            if text and channel:
                self.client.chat_postMessage(channel=channel, text=text, blocks=render([Text(text)]).blocks)
            elif text:
                log.warning("no channel for %s event %s; set the endpoint's channel", event.kind, event.id)
            return
        if not self._ensure_root(uow, dep):
            return
        if event.kind == "deployment.state":
            self._state_change(uow, dep, payload)
        elif event.kind == "gate.waiting":
            self._gate_waiting(uow, dep, payload)
        elif event.kind == "gate.decided":
            self._gate_decided(uow, dep, payload)
        elif event.kind == "rollout.progress":
            self._reply(dep, f":arrows_counterclockwise: {payload.get('message', '')}")
        elif payload.get("text"):
            self._reply(dep, str(payload["text"]))

    def _endpoint_channel(self, uow: SqlUnitOfWork, name: str | None) -> str | None:
        row = uow.endpoints.get(name) if name else None
        return ((row.settings or {}).get("channel") if row else None) or self.fallback_channel

    def _root_text(self, dep: Deployment, state: str | None = None, reason: str | None = None) -> str:
        # The title follows the event being delivered, not the database (which may already be further on).
        state, reason = (state, reason) if state else (dep.state, dep.state_reason)
        return (deployment_title(dep.id, dep.kind, dep.release.name, dep.endpoint.name, state)
                + f"\nrequested by <@{dep.requested_by}>" + (f"\n_{reason}_" if reason else ""))

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
        answer = self.client.chat_postMessage(channel=channel, text=text, blocks=render([Text(text)]).blocks)
        dep.slack_channel, dep.slack_thread_ts = answer["channel"], answer["ts"]
        uow.flush()
        return True

    def _reply(self, dep: Deployment, text: str, *, broadcast: bool = False, parts: list[Part] | None = None) -> dict[str, Any]:
        rendered = render(parts or [Text(text)])
        answer = self.client.chat_postMessage(
            channel=dep.slack_channel, thread_ts=dep.slack_thread_ts, text=rendered.text if parts else text,
            blocks=rendered.blocks, reply_broadcast=broadcast,
        )
        for piece in rendered.overflow:
            self.client.chat_postMessage(channel=dep.slack_channel, thread_ts=dep.slack_thread_ts, text=piece)
        return answer.data if hasattr(answer, "data") else dict(answer)

    def _state_change(self, uow: SqlUnitOfWork, dep: Deployment, payload: dict[str, Any]) -> None:
        target = str(payload.get("to"))
        reason = payload.get("reason")
        self._reply(dep, f"→ *{state_words(target)}*" + (f": {reason}" if reason else ""), broadcast=target in TERMINAL)
        self._update_root(dep, target, reason)
        if target == "live":
            # The release this one replaced is no longer live: its thread's title must say so too.
            for older in uow.deployments.in_states(dep.endpoint_id, ["superseded"]):
                if older.slack_thread_ts and older.state_reason == f"superseded by deployment #{dep.id}":
                    self._update_root(older)

    def _update_root(self, dep: Deployment, state: str | None = None, reason: str | None = None) -> None:
        text = self._root_text(dep, state, reason)
        self.client.chat_update(channel=dep.slack_channel, ts=dep.slack_thread_ts, text=text, blocks=render([Text(text)]).blocks)

    def _gate_row(self, uow: SqlUnitOfWork, payload: dict[str, Any]) -> GateResult | None:
        row_id = payload.get("gate_result_id")
        return uow.session.get(GateResult, row_id) if row_id else None

    def _gate_waiting(self, uow: SqlUnitOfWork, dep: Deployment, payload: dict[str, Any]) -> None:
        row = self._gate_row(uow, payload)
        if row is None or row.slack_ts:
            return  # already posted (a redelivery), or the report is gone
        report = GateReport.model_validate(row.report)
        if row.decision is None and dep.state not in TERMINAL:
            ticket = GateTicket(dep.id, row.gate, row.report_hash, dep.release.tuple_hash)
            parts = list(gate_parts(report, deployment_id=dep.id, release=dep.release.name, endpoint=dep.endpoint.name,
                                    kind=dep.kind, ticket=ticket))
            mention = f"<@{dep.requested_by}>"
            parts.insert(1, Text(f"Waiting for an approver (requested by {mention})."))
        else:
            parts = list(gate_parts(report, deployment_id=dep.id, release=dep.release.name, endpoint=dep.endpoint.name,
                                    kind=dep.kind))
            if row.decision and row.decided_by and row.decided_at:
                parts.append(decided_note(row.decision, row.decided_by, row.decided_at, row.decision_reason))
        answer = self._reply(dep, "", parts=parts)
        row.slack_channel, row.slack_ts = answer.get("channel", dep.slack_channel), answer["ts"]
        uow.flush()
        for older in uow.gates.for_deployment(dep.id):
            if older.gate == row.gate and older.id < row.id and older.decision is None and older.slack_ts:
                # A re-check replaced this report: its buttons must not be pressed any more.
                stale = [*gate_parts(GateReport.model_validate(older.report), deployment_id=dep.id, release=dep.release.name,
                                     endpoint=dep.endpoint.name, kind=dep.kind),
                         Note(f"Re-checked at {row.checked_at:%Y-%m-%d %H:%M} UTC: the new report is further down the thread.")]
                rendered = render(stale)
                self.client.chat_update(channel=older.slack_channel, ts=older.slack_ts, text=rendered.text, blocks=rendered.blocks)

    def _gate_decided(self, uow: SqlUnitOfWork, dep: Deployment, payload: dict[str, Any]) -> None:
        row = self._gate_row(uow, payload)
        decided_at = dt.datetime.fromisoformat(payload["decided_at"]) if payload.get("decided_at") else self.clock.now()
        note = decided_note(str(payload.get("decision")), str(payload.get("decided_by")), decided_at, payload.get("reason"))
        if row is None or not row.slack_ts:
            self._reply(dep, note.text)
            return
        report = GateReport.model_validate(row.report)
        parts = [*gate_parts(report, deployment_id=dep.id, release=dep.release.name, endpoint=dep.endpoint.name,
                             kind=dep.kind), note]
        rendered = render(parts)
        self.client.chat_update(channel=row.slack_channel, ts=row.slack_ts, text=rendered.text, blocks=rendered.blocks)
