"""Notices of the gates before exposure: admission, restores, drains, reminders, the ramp and pairs."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, ClassVar

from bot.domain.events.base import ChannelNotice, OutboxEvent


@dataclass(frozen=True, kw_only=True)
class AdmissionChanged(ChannelNotice):
    """The route now lets a different audience reach Kimi K3 (in the deployment's thread, or the channel)."""

    KIND: ClassVar[str] = "admission.changed"
    admission: str
    reason: str
    actor: str


@dataclass(frozen=True, kw_only=True)
class RestoreStarted(ChannelNotice):
    """A deploy ended after apply: the previous release is being restored by another deployment."""

    KIND: ClassVar[str] = "restore.started"
    restore_id: int | None
    release: str | None


@dataclass(frozen=True, kw_only=True)
class AdmissionStuck(ChannelNotice):
    """A restore or rollback failed while users were closed out: a person must take over (pages)."""

    KIND: ClassVar[str] = "admission.stuck"
    incident: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class DrainStalled(ChannelNotice):
    """Requests still run at the drain deadline: a person chooses to wait longer or to abort and reopen."""

    KIND: ClassVar[str] = "drain.stalled"
    running: float | None
    waiting: float | None


@dataclass(frozen=True, kw_only=True)
class GateReminder(ChannelNotice):
    """A gate has waited half its allowed time: its approvers are reminded once."""

    KIND: ClassVar[str] = "gate.reminder"
    gate: str
    expires_at: dt.datetime


@dataclass(frozen=True, kw_only=True)
class RampSplit(OutboxEvent):
    """The ramp as it happens: one thread message, edited in place at each step, soak and end.

    ``sides`` are the backends of the route, the candidate first: ``{"name", "weight"`` (percent of ordinary
    traffic), ``"cohort"`` (the internal cohort goes there), and from the last soak window ``"ttft_p99_ms"``,
    ``"error_rate"``, ``"requests"}``. ``outcome`` is None while ramping, then ``live`` or the abort's reason.
    """

    KIND: ClassVar[str] = "ramp.split"
    deployment_id: int
    step: str
    sides: tuple[dict[str, Any], ...]
    next_step: str | None = None
    next_at: dt.datetime | None = None
    outcome: str | None = None


@dataclass(frozen=True, kw_only=True)
class RampPlot(OutboxEvent):
    """The ramp ended (live or aborted): the PNG of its weights and latencies, uploaded into the thread.

    Written with the ramp's last split message; the notifier draws the PNG from the stored split messages when it
    delivers this (``path`` empty), so no plot is drawn while users wait on a broken step. An event written
    before that carries the file the engine drew (``path``, ``sha256``).
    """

    KIND: ClassVar[str] = "ramp.plot"
    deployment_id: int
    title: str
    path: str = ""
    sha256: str = ""


@dataclass(frozen=True, kw_only=True)
class ServiceRolledBack(ChannelNotice):
    """``/kimi rollback SERVICE``: one route change moved every user back to the side kept warm."""

    KIND: ClassVar[str] = "service.rolled_back"
    service: str
    to_side: str
    from_side: str
    release: str | None
    actor: str
