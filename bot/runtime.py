"""The running process's Context, for scheduled jobs.

APScheduler keeps jobs in its database job store as textual references
(``jobs.reservation_watch:run``) so that every replica, and every restart,
reads the same schedule. A job therefore cannot carry a Context: it is not
picklable, and a stored job must not be bound to the process that created it.
Instead, the process that starts the scheduler (``bot.scheduler.JobRunner``)
installs its Context here, and each job function asks for it with
:func:`current` when it runs. There is one Context per process; installing a
second replaces the first, and uninstalling only removes the one installed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.bootstrap import Context

_lock = threading.Lock()
_current: Context | None = None


class NoRuntime(RuntimeError):
    """A job ran in a process that installed no Context (it was not started by the scheduler)."""


def install(ctx: Context) -> None:
    global _current
    with _lock:
        _current = ctx


def uninstall(ctx: Context) -> None:
    global _current
    with _lock:
        if _current is ctx:
            _current = None


def current() -> Context:
    with _lock:
        ctx = _current
    if ctx is None:
        raise NoRuntime("no kimi-ops Context is installed; jobs run inside `kimi-ops serve` or `kimi-ops jobs start`")
    return ctx
