"""What every repository shares: its session, adding a row with constraint errors as :class:`Conflict`, and
SQLite's stand-in for ``FOR UPDATE``."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import ColumnElement, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

_Row = TypeVar("_Row")


def write_lock_on_sqlite(session: Session, model: type[Any], where: ColumnElement[bool]) -> None:
    """SQLite ignores ``FOR UPDATE``; a no-op write takes its database write lock until commit instead.

    Without it two replicas' (or two clicks') read-check-write sequences on the same row
    interleave: both see the gate waiting and both approve it.
    """
    if session.get_bind().dialect.name == "sqlite":
        # It changes no value, so no loaded object needs the ORM's search for the rows it matched.
        session.execute(update(model).where(where).values(id=model.id).execution_options(synchronize_session=False))


class Conflict(Exception):
    """A write broke a database constraint (unique name, one decision per gate, one deployment in flight)."""


def flush(session: Session) -> None:
    """Flush, translating constraint violations into :class:`Conflict` so services need no SQL types."""
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict(str(exc.orig).splitlines()[0] if exc.orig else str(exc)) from exc


class Repository:
    """A repository adds and reads in its unit of work's session; it never commits."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def _add(self, obj: _Row) -> _Row:
        self.session.add(obj)
        flush(self.session)
        return obj


