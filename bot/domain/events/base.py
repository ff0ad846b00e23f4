"""The base of every outbox event and of every notice for a channel; how fields map onto the stored row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

SPREAD = {"spread": True}


def key_field(name: str) -> dict[str, str]:
    return {"key": name}


@dataclass(frozen=True, kw_only=True)
class OutboxEvent:
    """Base of every outbox event; ``KIND`` is what the row's ``kind`` column holds (empty: not stored itself)."""

    KIND: ClassVar[str] = ""
    deployment_id: int | None = None
    endpoint_name: str | None = None


@dataclass(frozen=True, kw_only=True)
class ChannelNotice(OutboxEvent):
    """An alert for a channel: ``channel``, or the endpoint's when ``None``."""

    text: str
    channel: str | None = None
