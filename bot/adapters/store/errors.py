"""Which database failures are an outage (try again later) rather than a bug or a refused change."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError


def store_unavailable(exc: BaseException) -> bool:
    """True when the database could not be reached or dropped the connection: nothing was committed.

    ``OperationalError`` and ``InterfaceError`` are the DB-API's words for a server that is down, restarting,
    unreachable or locked; a ``DBAPIError`` whose connection SQLAlchemy invalidated is a cut connection.
    """
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)
