"""Pure rules of gate expiry: when a waiting gate is reminded about and when it expires.

A gate nobody decides must not hold its endpoint forever. Before apply the
endpoint still serves the previous release, so a gate may wait hours; once the
candidate is applied users are closed out, so a gate may wait only minutes.
At half the allowed wait the approvers are reminded once; at the end, a gate
before apply ends the deployment (freeing the endpoint) and a gate after apply
ends it and restores the previous release.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum


class Due(StrEnum):
    NOTHING = "nothing"
    REMIND = "remind"
    EXPIRE = "expire"


@dataclass(frozen=True)
class GateClock:
    """When one waiting gate started waiting and how long it may wait."""

    waiting_since: dt.datetime
    allowed: dt.timedelta

    @property
    def remind_at(self) -> dt.datetime:
        return self.waiting_since + self.allowed / 2

    @property
    def expires_at(self) -> dt.datetime:
        return self.waiting_since + self.allowed

    def due(self, now: dt.datetime, *, reminded: bool) -> Due:
        """What is due now: expiry wins over a reminder that was never sent."""
        if now >= self.expires_at:
            return Due.EXPIRE
        if now >= self.remind_at and not reminded:
            return Due.REMIND
        return Due.NOTHING

    def left(self, now: dt.datetime) -> dt.timedelta:
        return max(dt.timedelta(0), self.expires_at - now)


def words(delta: dt.timedelta) -> str:
    """``2 h 5 min``, ``14 min``, ``40 s``: how long, for a person."""
    seconds = int(delta.total_seconds())
    if seconds >= 3600:
        hours, rest = divmod(seconds, 3600)
        return f"{hours} h {rest // 60} min" if rest >= 60 else f"{hours} h"
    if seconds >= 60:
        return f"{seconds // 60} min"
    return f"{seconds} s"
