"""Clocks: the real one and a movable one for tests, jobs and the sandbox."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Protocol, runtime_checkable


class Clock(Protocol):
    def now(self) -> dt.datetime: ...


@runtime_checkable
class Sleeps(Protocol):
    """A clock that can wait: a drill waits between its looks through it, so a test's clock moves instead."""

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Timezone-aware UTC wall clock."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


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

    def sleep(self, seconds: float) -> None:
        """Move on by ``seconds`` at once, after a short real pause so stand-ins on their own threads move too."""
        time.sleep(0.05)
        self.advance(dt.timedelta(seconds=seconds))
