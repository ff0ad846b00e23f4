"""Notices after go-live: the metrics watch's pages and recoveries, incidents handled, SLO plots, drills, failover."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from bot.domain.events.base import ChannelNotice


@dataclass(frozen=True, kw_only=True)
class WatchAlert(ChannelNotice):
    """The metrics watch opened an incident: a burn-rate alert or a direct page, with what the endpoint runs.

    ``severity`` is ``page`` (mentions the on-call group) or ``warn``; ``silenced`` is True when a person
    silenced this kind on the endpoint, so the incident is recorded but not posted. ``context`` holds the live
    release, the last deployment and what it changed; the chat adds Acknowledge, Silence and Roll back.
    """

    KIND: ClassVar[str] = "watch.alert"
    incident_id: int
    incident: str
    severity: str
    reason: str
    silenced: bool = False
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class WatchRecovered(ChannelNotice):
    """The metrics watch closed an incident: one message, in the alert's thread when it has one."""

    KIND: ClassVar[str] = "watch.recovered"
    incident_id: int
    incident: str
    silenced: bool = False


@dataclass(frozen=True, kw_only=True)
class IncidentHandled(ChannelNotice):
    """A person acknowledged or silenced an incident: the alert message says so in place."""

    KIND: ClassVar[str] = "incident.handled"
    incident_id: int
    action: str
    actor: str


@dataclass(frozen=True, kw_only=True)
class SloPlot(ChannelNotice):
    """``/kimi slo`` drew the last hours of an endpoint: the notifier uploads the PNG to ``channel``."""

    KIND: ClassVar[str] = "slo.plot"
    path: str
    sha256: str
    title: str


@dataclass(frozen=True, kw_only=True)
class DrillNotice(ChannelNotice):
    """An availability drill was asked for, approved, rejected or ended: one line in the endpoint's channel."""

    KIND: ClassVar[str] = "drill.notice"
    drill_id: int
    state: str


@dataclass(frozen=True, kw_only=True)
class FailoverNotice(ChannelNotice):
    """Users moved to the fallback because Kimi K3 stopped answering, or back: said in the incident's thread."""

    KIND: ClassVar[str] = "failover.notice"
    incident_id: int | None = None  # the incident that moved them (its alert's thread), when it is known


@dataclass(frozen=True, kw_only=True)
class RulesNotApplied(ChannelNotice):
    """After a go-live, the cluster refused (or did not answer) the endpoint's ``PrometheusRule``: said in the
    deployment's thread, else in the thread of the message ``reply_to`` names (a service's rollback), else in the
    endpoint's channel; the next metrics-watch round applies it again."""

    KIND: ClassVar[str] = "alert_rules.not_applied"
    rule: str
    reason: str
    reply_to: str | None = None  # the post key of the message that moved the users (``event:<id>``)
