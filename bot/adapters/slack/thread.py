"""A deployment's Slack thread: its root, its one progress message, gate messages, plots and the ramp.

The notifier (:mod:`bot.adapters.slack.notifier`) hands each outbox event of a
deployment here, through one handler per event class (:attr:`DeploymentThread.HANDLERS`):

* the first event of a deployment posts the thread's root message in the
  endpoint's channel (or the channel the request came from) and keeps its ``ts``;
* ``deployment.state``, ``rollout.progress`` and ``admission.changed`` edit the
  deployment's one progress message in place (``progress:<id>``: the newest step
  delivered, the steps so far, Slack dates that every client keeps current, pods
  ready, the last event), posted in the thread the first time, then edited at most
  once every few seconds (an ending at once), with the root's title refreshed
  after it, never ahead: a deploy's thread is its root, one message per gate
  report and this one message;
* ``gate.waiting`` posts the check report with Approve/Reject buttons in the
  thread (the part that does not fit Slack's limits follows as replies);
* ``gate.decided`` updates that gate message in place: no buttons, who and when;
* a traffic gate message also offers "Accept proposed limits" while its
  proposal differs from the endpoint's limits; ``limits.accepted`` updates it
  in place to say who accepted which limits and when;
* a model or traffic report gets its plot uploaded into the thread
  (``files_upload_v2``) by its own ``gate.plot`` event, written in the same
  transaction that records the gate message, so the message is posted (and can
  be decided) before the plot is drawn, and a failed upload is retried without
  posting the gate message twice. The plot is drawn then, from the report's
  stored numbers (:mod:`bot.adapters.gate_plots`), on whichever replica delivers.

Every post goes through :class:`~bot.adapters.slack.once.PostOnce`; what each
message says comes from :mod:`bot.adapters.slack.messages`.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from slack_sdk import WebClient

from bot.adapters.clock import Clock
from bot.adapters.gate_plots import gate_png, plottable
from bot.adapters.plots import png_bytes, ramp_figure
from bot.adapters.slack.blocks import render, slack_text
from bot.adapters.slack.messages import (
    deployment_actors,
    gate_message,
    gate_plot_alt_text,
    gate_plot_title,
    limits_accepted_text,
    plot_filename,
    progress_parts,
    replaced_gate_message,
    root_text,
    thread_step,
)
from bot.adapters.slack.once import PostInFlight, PostOnce
from bot.adapters.store.models import Deployment, GateResult
from bot.adapters.store.outbox import event_of
from bot.adapters.store.uow import SqlUnitOfWork
from bot.domain.chat_text import stored_reason, unmarked
from bot.domain.events import (
    AdmissionChanged,
    ChannelNotice,
    DeploymentRequested,
    GateDecided,
    GatePlot,
    GateWaiting,
    LimitsAccepted,
    OutboxEvent,
    RampPlot,
    RampSplit,
    RolloutProgress,
    StateChanged,
)
from bot.domain.states import State, superseded_reason, work_kind
from bot.logs import logger_for
from bot.views.deployments import state_words
from bot.views.gates import decided_note
from bot.views.parts import Part, Text
from bot.views.ramp import ramp_parts

log = logger_for(__name__)

PROGRESS_EVERY_SECONDS = 4.0
"""At most one edit of a progress message this often: Slack's chat.update allows about 50 a minute per workspace.
0 shows each event's progress as it is delivered (the local console, where nobody else's rate limit counts)."""
Handler = Callable[["DeploymentThread", SqlUnitOfWork, Deployment, Any, str], None]
"""Delivers one event of a deployment whose thread exists; the last argument keys the event's own post."""


def thread_of(channel: str | None, ts: str | None) -> tuple[str, str]:
    """Where a message already posted lives; callers reach here only after it was posted."""
    if channel is None or ts is None:
        raise RuntimeError("the Slack message has no channel or ts yet")
    return channel, ts


class DeploymentThread:
    """Delivers the events of one deployment into its thread; ``on_follow_up`` is told when one wrote another event."""

    def __init__(self, client: WebClient, posts: PostOnce, clock: Clock, *, fallback_channel: str | None,
                 on_follow_up: Callable[[], None], plot_dir: Path | None = None) -> None:
        self.client = client
        self.plot_dir = plot_dir  # where a copy of each gate plot drawn is kept (none when None)
        self.posts = posts
        self.clock = clock
        self.fallback_channel = fallback_channel
        self.on_follow_up = on_follow_up
        self._origins: dict[int, str] = {}
        self._lock = threading.Lock()
        self.progress_every = PROGRESS_EVERY_SECONDS
        # Deployment id → the newest "last" line noted for its progress message (and its step), not shown yet.
        self._pending: dict[int, tuple[str | None, State | None]] = {}
        self._edited: dict[int, float] = {}  # when (time.monotonic) each progress message was last edited
        self._root_shown: dict[int, tuple[State, str | None]] = {}
        self._shown_step: dict[int, State] = {}

    def remember_origin(self, deployment_id: int, channel: str | None) -> None:
        """The channel a request came from: the thread goes there when the endpoint names no channel."""
        if channel:
            with self._lock:
                self._origins[deployment_id] = channel

    def deliver(self, uow: SqlUnitOfWork, dep: Deployment, event: OutboxEvent, key: str) -> None:
        """Deliver ``event`` into the thread of ``dep``, posting its root first; nothing without a channel."""
        if not self._ensure_root(uow, dep):
            return
        handler = next((h for cls in type(event).__mro__ if (h := self.HANDLERS.get(cls)) is not None), None)
        if handler is not None:
            handler(self, uow, dep, event, key)

    def _requested(self, uow: SqlUnitOfWork, dep: Deployment, event: DeploymentRequested, key: str) -> None:
        """The root message is the whole announcement, and ``_ensure_root`` posted it."""

    def _progress(self, uow: SqlUnitOfWork, dep: Deployment, event: RolloutProgress, key: str) -> None:
        known = {s.value for s in State}
        self._note_progress(dep, event.message, State(event.state) if event.state in known else None)

    def _ramp_split(self, uow: SqlUnitOfWork, dep: Deployment, event: RampSplit, key: str) -> None:
        """One message per ramp (key ``ramp:<deployment>``), posted once and edited in place by every later event."""
        service = ((dep.endpoint.settings or {}).get("pair") or {}).get("service")
        rendered = render(ramp_parts(event, service))
        channel, ts = self._reply(dep, f"ramp:{dep.id}", rendered.text, parts=ramp_parts(event, service))
        self.client.chat_update(channel=channel, ts=ts, text=rendered.text, blocks=rendered.blocks)

    def _ramp_plot(self, uow: SqlUnitOfWork, dep: Deployment, event: RampPlot, key: str) -> None:
        """The ramp's PNG into its thread, once, drawn here from its stored split messages.

        An event written by an earlier version names the file the engine drew: one not readable on this replica (or
        changed) becomes a note.
        """
        if not event.path:
            self._draw_ramp(uow, dep, event, key)
            return
        try:
            data: bytes | None = Path(event.path).read_bytes()
        except OSError:
            data = None
        if data is None or hashlib.sha256(data).hexdigest() != event.sha256:
            self._reply(dep, key, "The ramp's plot is not available on this kimi-ops replica; the ramp message above "
                                  "has its numbers.")
            return
        channel, thread_ts = thread_of(dep.slack_channel, dep.slack_thread_ts)
        self.posts.upload(key, channel, thread_ts, data, filename=Path(event.path).name, title=event.title)

    def _draw_ramp(self, uow: SqlUnitOfWork, dep: Deployment, event: RampPlot, key: str) -> None:
        points = [{"at": row.at, "step": split.step, "sides": list(split.sides)}
                  for row in uow.events.for_deployment(dep.id)
                  if row.kind == RampSplit.KIND and isinstance(split := event_of(row), RampSplit)]
        if len(points) < 2:
            return  # one split is no line to draw; the ramp message has it
        try:
            data = png_bytes(ramp_figure(points, event.title))
        except Exception:  # the ramp message above has the numbers; a missing picture is a note
            log.warning("the ramp plot of deployment #%s could not be drawn", dep.id, exc_info=True)
            self._reply(dep, key, "The ramp's plot could not be drawn; the ramp message above has its numbers.")
            return
        name = f"ramp-{dep.endpoint.name}-{dep.id}.png"
        self._keep(name, data)
        channel, thread_ts = thread_of(dep.slack_channel, dep.slack_thread_ts)
        self.posts.upload(key, channel, thread_ts, data, filename=name, title=event.title)

    def _thread_notice(self, uow: SqlUnitOfWork, dep: Deployment, event: ChannelNotice, key: str) -> None:
        if event.text:
            self._reply(dep, key, slack_text(event.text))

    def _admission_changed(self, uow: SqlUnitOfWork, dep: Deployment, event: AdmissionChanged, key: str) -> None:
        # Each ramp step changes admission: the progress message says it, the thread does not grow.
        self._note_progress(dep, event.text)

    # ------------------------------------------------------------------ the one progress message
    def _note_progress(self, dep: Deployment, last: str | None, step: State | None = None) -> None:
        """Note that the progress message (and the root's title) should change; :meth:`flush` edits it, coalesced.

        ``step`` is the step ``last`` speaks of, when it names one: a line of an older step is not shown under a newer.
        """
        with self._lock:
            self._pending[dep.id] = (last, step) if last else self._pending.get(dep.id, (None, None))

    def flush(self, uow: SqlUnitOfWork) -> None:
        """Edit each noted progress message, at most once every :attr:`progress_every` seconds per message.

        Called after every pass over the outbox, so a burst of events is one edit showing the newest step (read
        from the state changes delivered, :func:`thread_step`); an ending, and a message not posted yet, go at
        once. The root's title follows in the same flush, after the progress message: it never runs ahead.
        """
        with self._lock:
            noted = dict(self._pending)
        for deployment_id, (last, said_at) in noted.items():
            dep = uow.deployments.get(deployment_id)
            if dep is None or not dep.slack_thread_ts:
                self._forget(deployment_id, noted[deployment_id])
                continue
            step = thread_step(uow, dep)
            key = f"progress:{dep.id}"
            where = self.posts.posted(key)
            edited = self._edited.get(dep.id)
            ending = step.state.terminal and self._shown_step.get(dep.id) != step.state
            if where is not None and not ending and edited is not None and time.monotonic() - edited < self.progress_every:
                continue  # a later pass shows it (the outbox runs every few seconds)
            if said_at is not None and said_at != step.state:  # a line of another step: say the step itself
                last = f"→ *{step.state.words}*" + (f": {stored_reason(step.reason, deployment_actors(uow, dep))}"
                                                     if step.reason else "")
            rendered = render(progress_parts(uow, dep, step, last))
            if where is not None:
                self.client.chat_update(channel=where[0], ts=where[1], text=rendered.text, blocks=rendered.blocks)
            else:
                channel, thread_ts = thread_of(dep.slack_channel, dep.slack_thread_ts)
                try:
                    self.posts.post(key, channel, rendered.text, blocks=rendered.blocks, thread_ts=thread_ts)
                except PostInFlight as exc:  # another replica posts it now: a later flush edits it instead
                    log.info("progress message waits: %s", exc)
                    continue
            self._edited[dep.id], self._shown_step[dep.id] = time.monotonic(), step.state
            self._forget(deployment_id, noted[deployment_id])
            if self._root_shown.get(dep.id) != (step.state, step.reason):
                self._update_root(uow, dep, step.state, step.reason)
                self._root_shown[dep.id] = (step.state, step.reason)

    def _forget(self, deployment_id: int, noted: tuple[str | None, State | None]) -> None:
        """Drop a noted edit once shown, unless a newer one was noted meanwhile."""
        with self._lock:
            if self._pending.get(deployment_id) == noted:
                del self._pending[deployment_id]

    def _ensure_root(self, uow: SqlUnitOfWork, dep: Deployment) -> bool:
        if dep.slack_thread_ts:
            return True
        with self._lock:
            origin = self._origins.get(dep.id)
        channel = (dep.endpoint.settings or {}).get("channel") or origin or self.fallback_channel
        if not channel:
            log.warning("no channel for deployment #%s; set the channel of endpoint %s", dep.id, dep.endpoint.name)
            return False
        text = root_text(dep, actors=deployment_actors(uow, dep))
        dep.slack_channel, dep.slack_thread_ts = self.posts.post(f"deployment:{dep.id}", channel, text,
                                                                 blocks=render([Text(text)]).blocks)
        return True

    def _reply(self, dep: Deployment, key: str, text: str, *, broadcast: bool = False,
               parts: list[Part] | None = None) -> tuple[str, str]:
        """Reply in the deployment's thread (what does not fit follows as replies keyed ``key/1``…): channel and ts."""
        rendered = render(parts or [Text(text)])
        channel, thread_ts = thread_of(dep.slack_channel, dep.slack_thread_ts)
        posted = self.posts.post(key, channel, rendered.text if parts else text, blocks=rendered.blocks, thread_ts=thread_ts,
                                 broadcast=broadcast)
        for number, piece in enumerate(rendered.overflow, 1):
            self.posts.post(f"{key}/{number}", channel, piece, thread_ts=thread_ts)
        return posted

    def _state_change(self, uow: SqlUnitOfWork, dep: Deployment, event: StateChanged, key: str) -> None:
        target, reason = State(event.to_state), event.reason
        said = f": {stored_reason(reason, deployment_actors(uow, dep))}" if reason else ""
        self._note_progress(dep, f"→ *{state_words(target)}*{said}", target)
        if target == State.LIVE:
            # The release this one replaced is no longer live: its thread's title must say so too.
            for older in uow.deployments.in_states(dep.endpoint_id, [State.SUPERSEDED]):
                replaced_by = superseded_reason(dep.id, work_kind(dep.kind, dep.cause_id), older.release_id == dep.release_id)
                if older.slack_thread_ts and older.state_reason == replaced_by:
                    self._update_root(uow, older)

    def _update_root(self, uow: SqlUnitOfWork, dep: Deployment, state: str | None = None,
                     reason: str | None = None) -> None:
        text = root_text(dep, state, reason, actors=deployment_actors(uow, dep))
        channel, ts = thread_of(dep.slack_channel, dep.slack_thread_ts)
        # The notification text as shown, without the marks literal() put on typed ids (as a post takes them out).
        self.client.chat_update(channel=channel, ts=ts, text=unmarked(text), blocks=render([Text(text)]).blocks)

    def _gate_row(self, uow: SqlUnitOfWork, row_id: int | None) -> GateResult | None:
        return uow.gates.get(row_id) if row_id else None

    def _update_gate(self, uow: SqlUnitOfWork, row: GateResult, parts: list[Part]) -> None:
        rendered = render(parts)
        channel, ts = thread_of(row.slack_channel, row.slack_ts)
        self.client.chat_update(channel=channel, ts=ts, text=rendered.text, blocks=rendered.blocks)

    def _gate_waiting(self, uow: SqlUnitOfWork, dep: Deployment, event: GateWaiting, key: str) -> None:
        row = self._gate_row(uow, event.gate_result_id)
        if row is None or row.slack_ts:
            return  # already posted (a redelivery), or the report is gone
        # Keyed by the gate result, not the event: one report is one message, whoever asks to post it.
        row.slack_channel, row.slack_ts = self._reply(dep, f"gate:{row.id}", "", parts=gate_message(uow, dep, row))
        if plottable(row.report):
            # Its own event, committed with the gate message's ts: the plot is drawn after the message is posted,
            # and a failed upload is retried alone.
            uow.events.emit(GatePlot(deployment_id=dep.id, endpoint_name=dep.endpoint.name, gate=row.gate, gate_result_id=row.id),
                            at=self.clock.now())
            self.on_follow_up()
        uow.flush()
        for older in uow.gates.for_deployment(dep.id):
            if older.gate == row.gate and older.id < row.id and older.decision is None and older.slack_ts:
                # A re-check replaced this report: its buttons must not be pressed any more.
                self._update_gate(uow, older, replaced_gate_message(uow, dep, older, row))

    def _gate_decided(self, uow: SqlUnitOfWork, dep: Deployment, event: GateDecided, key: str) -> None:
        row = self._gate_row(uow, event.gate_result_id)
        if row is None or not row.slack_ts:
            note = decided_note(event.decision, event.decided_by, event.decided_at, event.reason)
            self._reply(dep, key, slack_text(note.text))
            return
        self._update_gate(uow, row, gate_message(uow, dep, row))

    def _limits_accepted(self, uow: SqlUnitOfWork, dep: Deployment, event: LimitsAccepted, key: str) -> None:
        row = self._gate_row(uow, event.gate_result_id)
        if row is not None and row.slack_ts:
            self._update_gate(uow, row, gate_message(uow, dep, row))
            return
        # The gate message was never posted (no channel then): say it in the thread instead.
        self._reply(dep, key, limits_accepted_text(event.accepted_by, event.accepted))

    def _gate_plot(self, uow: SqlUnitOfWork, dep: Deployment, event: GatePlot, key: str) -> None:
        """Draw the gate's plot from its stored report and upload it, once; one that cannot be drawn becomes a note."""
        row = self._gate_row(uow, event.gate_result_id)
        if row is None:
            return  # the report is gone: nothing to draw
        gate = event.gate or row.gate
        try:
            data = gate_png(row.report, endpoint=dep.endpoint.name, release=dep.release.name)
        except Exception:  # a plot is a convenience: the gate message above has the numbers
            log.warning("plot of the %s gate of deployment #%s could not be drawn", gate, dep.id, exc_info=True)
            self._reply(dep, key, f"The {gate} gate's plot could not be drawn; the table above has the same numbers.")
            return
        if data is None:
            return  # nothing to draw (an event written before the report's numbers were stored this way)
        filename = plot_filename(dep.endpoint.name, dep.release.name, gate)
        self._keep(f"gate-{row.id}-{filename}", data)
        channel, thread_ts = thread_of(dep.slack_channel, dep.slack_thread_ts)
        self.posts.upload(key, channel, thread_ts, data, filename=filename, title=gate_plot_title(gate, dep.id),
                          alt_text=gate_plot_alt_text(gate, dep.id))

    def _keep(self, name: str, data: bytes) -> None:
        """A copy of a drawn plot in :attr:`plot_dir`, for whoever reads the files there; best effort."""
        if self.plot_dir is None:
            return
        try:
            self.plot_dir.mkdir(parents=True, exist_ok=True)
            (self.plot_dir / name).write_bytes(data)
        except OSError as exc:
            log.warning("plot not kept in %s: %s", self.plot_dir, exc)

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
