"""Whether the current thread wrote an outbox row since it last asked: a request that wrote nothing skips delivery.

After every Slack request the app delivered the outbox, a query (and on SQLite a wait for the write lock)
competing with the next acknowledgement even when the request only read. ``EventRepository.emit`` notes each
write on its thread; the request's own delivery, on that same thread, asks :func:`take`. Events other
threads or replicas write are delivered by the periodic pass, as before.
"""

from __future__ import annotations

import threading

_local = threading.local()


def note() -> None:
    _local.written = True


def take() -> bool:
    """True when this thread wrote an outbox row since the last ``take`` (a rolled-back one counts: one empty look)."""
    written = bool(getattr(_local, "written", False))
    _local.written = False
    return written
