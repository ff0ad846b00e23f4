"""Whether this process can do its work: what ``/readyz`` reports (``/healthz`` only says the process answers).

Ready means the database answers and its schema is the one this code was
written for (Alembic's head). Each check returns the problems it found, as
sentences an operator can act on; no problem means ready. The Slack edge adds
its own (the Socket Mode connection) and bounds how long a check may take.
"""

from __future__ import annotations

import functools

from bot.adapters.store import schema
from bot.services.context import Context


@functools.cache
def _head() -> str:
    return schema.head_revision()  # reads the migration scripts: once per process


def database_problems(ctx: Context) -> list[str]:
    """``[]`` when the database answers at the schema this kimi-ops expects; otherwise what is wrong."""
    try:
        current = schema.current_revision(ctx.uow.engine)
    except Exception as exc:  # any driver error means the same thing to a probe: not now
        return [f"the database does not answer ({type(exc).__name__})"]
    head = _head()
    if current != head:
        return [f"the database schema is at {current or 'nothing'}, this kimi-ops needs {head}; run `kimi-ops db upgrade`"]
    return []
