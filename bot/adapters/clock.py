"""Clocks: the real one and a movable one for tests, jobs and the sandbox."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Protocol


class Clock(Protocol):
    def now(self) -> dt.datetime: ...


class SystemClock:
    """Timezone-aware UTC wall clock."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)


class FrozenClock:
    """A clock that only moves when told to (thread-safe)."""

    def __init__(self, start: dt.datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("FrozenClock needs a timezone-aware start")
        self._now = start.astimezone(dt.UTC)
        self._lock = threading.Lock()

    def now(self) -> dt.datetime:
        with self._lock:
            return self._now

    def advance(self, delta: dt.timedelta) -> None:
        with self._lock:
            self._now += delta

    def set(self, when: dt.datetime) -> None:
        with self._lock:
            self._now = when.astimezone(dt.UTC)
