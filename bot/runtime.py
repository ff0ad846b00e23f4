"""The running process's one :class:`~bot.bootstrap.Root`, for scheduled jobs.

APScheduler keeps jobs in its database job store as textual references
(``jobs.reservation_watch:run``) so that every replica, and every restart,
reads the same schedule. A job therefore cannot carry the root: it is not
picklable, and a stored job must not be bound to the process that created it.
Instead, the process that starts the scheduler (``bot.scheduler.JobRunner``)
installs its root here, and each job function asks for it with :func:`current`
when it runs. There is one root per process; installing a second replaces the
first, and uninstalling only removes the one installed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.bootstrap import Root

_lock = threading.Lock()
_installed: Root | None = None


class NoRuntime(RuntimeError):
    """A job ran in a process that installed no root (it was not started by the scheduler)."""


def install(root: Root) -> None:
    global _installed
    with _lock:
        _installed = root


def uninstall(root: Root) -> None:
    global _installed
    with _lock:
        if _installed is root:
            _installed = None


def current() -> Root:
    with _lock:
        root = _installed
    if root is None:
        raise NoRuntime("no kimi-ops root is installed; jobs run inside `kimi-ops serve` or `kimi-ops jobs start`")
    return root
