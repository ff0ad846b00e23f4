"""Every ``/kimi`` sub-command but ``help``, in the order ``help`` lists them.

``help`` lists these after itself; :mod:`commands.registry` dispatches to all of them. Apart from the registry so
that ``help`` reads the list without importing the registry that imports it.
"""

from __future__ import annotations

from types import ModuleType

from commands import (
    admission,
    cancel,
    capacity,
    deploy,
    diff,
    drain,
    drill,
    drills,
    exception,
    exceptions,
    gates,
    history,
    licence,
    ramp,
    release,
    reservations,
    rollback,
    slo,
    status,
)

OTHERS: tuple[ModuleType, ...] = (
    deploy, status, slo, history, release, diff, gates, rollback, cancel, drain, ramp, admission, reservations,
    licence, exceptions, exception, drill, drills, capacity,
)
