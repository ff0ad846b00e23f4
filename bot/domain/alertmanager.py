"""Alertmanager's webhook notification (payload version 4) and the incidents it means for kimi-ops (pure).

Alertmanager posts one notification per alert group: every alert of the group, firing and recently resolved,
each with its labels, annotations and ``fingerprint`` (a hash of its label set). kimi-ops reads the alerts its
own rules make (:mod:`bot.domain.alert_rules`): ``endpoint`` names the endpoint, ``kimi_ops_kind`` the incident
kind (``burn-page:ttft``, ``gpu``…) the built-in watch would have opened; other alerts in the group are not
kimi-ops's and are left alone.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.domain.alert_rules import KIND_LABEL

MAX_BODY = 1024 * 1024  # Alertmanager's default max_alerts is unlimited; a megabyte holds thousands


class WebhookAlert(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    status: Literal["firing", "resolved"]
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: dt.datetime | None = None
    endsAt: dt.datetime | None = None
    generatorURL: str = ""
    fingerprint: str = Field(min_length=1, max_length=64, pattern=r"^[!-~]+$")  # Alertmanager's: hex digits


class WebhookNotification(BaseModel):
    """The JSON body Alertmanager's ``webhook_configs`` receiver posts (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    version: Literal["4"]
    groupKey: str = ""
    status: Literal["firing", "resolved"]
    receiver: str = ""
    externalURL: str = ""
    alerts: list[WebhookAlert] = Field(max_length=10_000)


@dataclass(frozen=True)
class AlertSignal:
    """One of kimi-ops's alerts in a notification: open (firing) or close (resolved) an incident."""

    endpoint: str
    kind: str
    severity: str
    firing: bool
    fingerprint: str
    reason: str
    release: str | None


def signals(notification: WebhookNotification, kinds: frozenset[str]) -> tuple[list[AlertSignal], int]:
    """kimi-ops's alerts in the notification, in order, and how many others it carried (not kimi-ops's)."""
    found: list[AlertSignal] = []
    others = 0
    for alert in notification.alerts:
        endpoint, kind = alert.labels.get("endpoint"), alert.labels.get(KIND_LABEL)
        if not endpoint or kind not in kinds:
            others += 1
            continue
        reason = alert.annotations.get("description") or alert.annotations.get("summary") or alert.labels.get(
            "alertname", kind)
        release = alert.labels.get("release")
        found.append(AlertSignal(endpoint=endpoint, kind=kind, severity=alert.labels.get("severity", "page"),
                                 firing=alert.status == "firing", fingerprint=alert.fingerprint,
                                 reason=printable(reason)[:500].rstrip("."),
                                 release=release if release and release != "none" else None))
    return found, others


def printable(text: str) -> str:
    """``text`` on one line without control characters (PostgreSQL refuses NUL; Slack shows the rest as boxes)."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def silence_matchers(labels: dict[str, str]) -> list[dict[str, object]]:
    """Alertmanager API v2 matchers: each label equal (not a regex)."""
    return [{"name": name, "value": value, "isRegex": False, "isEqual": True} for name, value in sorted(labels.items())]
