"""Whether this process can do its work: what ``/readyz`` reports (``/healthz`` only says the process answers).

Ready means the database answers and its schema is the one this code was
written for (Alembic's head). Each check returns the problems it found, as
sentences an operator can act on; no problem means ready. The Slack edge adds
its own (the Socket Mode connection) and bounds how long a check may take.
"""

from __future__ import annotations

from bot.adapters.store import schema
from bot.services.context import Context


def database_problems(ctx: Context) -> list[str]:
    """``[]`` when the database answers at the schema this kimi-ops expects; otherwise what is wrong.

    Read as the start-up check reads them, without Alembic: its import alone cost a probed ``serve`` a fifth of
    a CPU-second, and each probe configured a migration context.
    """
    try:
        current = schema.stored_revision(ctx.uow.engine)
    except Exception as exc:  # any driver error means the same thing to a probe: not now
        driver_error = exc.__context__ if isinstance(exc, schema.DatabaseUnreachable) else None
        return [f"the database does not answer ({type(driver_error or exc).__name__})"]
    head = schema.quick_head()  # read from the migration scripts once per process
    if current != head:
        return [f"the database schema is at {current or 'nothing'}, this kimi-ops needs {head}; run `kimi-ops db upgrade`"]
    return []
