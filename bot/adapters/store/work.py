"""The ``slack_work`` table: Slack follow-ups recorded by the answering process, taken by workers under a lease.

A worker takes the oldest row nobody holds (or whose holder's lease lapsed) with one conditional ``UPDATE``, so
two workers never hold one row at once; on PostgreSQL the candidate is read ``FOR UPDATE SKIP LOCKED``, so
concurrent workers take different rows instead of queueing on one. The holder renews its leases while it works
and deletes the row when done; only the holder may delete it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from sqlalchemy import Connection, CursorResult, Engine, bindparam, delete, insert, or_, select, text, update
from sqlalchemy.orm import Session

from bot.adapters.store.models import SlackWork, UTCDateTime

BATCH = 100  # jobs in one statement at most
AT = bindparam("at", type_=UTCDateTime())  # stored exactly as the ORM stores a time (SQLite keeps it as text)

# The claim and the job in one statement (PostgreSQL runs a data-modifying CTE atomically): one round trip in
# autocommit, where a session's transaction is four (BEGIN, two inserts, COMMIT). The job's row exists only if
# the claim was won.
CLAIM_AND_RECORD_PG = text(
    "WITH claimed AS (INSERT INTO slack_deliveries (key, received_at) VALUES (:key, :at) "
    "ON CONFLICT (key) DO NOTHING RETURNING key) "
    "INSERT INTO slack_work (created_at, function, request, attempts) "
    "SELECT :at, :function, CAST(:request AS JSON), 0 FROM claimed RETURNING id").bindparams(AT)
CLAIM_SQLITE = text("INSERT OR IGNORE INTO slack_deliveries (key, received_at) VALUES (:key, :at)").bindparams(AT)
RECORD_SQLITE = text("INSERT INTO slack_work (created_at, function, request, attempts) "
                     "SELECT :at, :function, :request, 0 WHERE changes() = 1").bindparams(AT)


def claim_and_record(engine: Engine, key: str, function: str, job: dict[str, Any], at: dt.datetime) -> bool:
    """Claim request ``key`` and record its job in one short transaction; ``False`` (nothing recorded) when another
    delivery of the request claimed it first."""
    values = _values(key, function, job, at)
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            return conn.execute(CLAIM_AND_RECORD_PG, values).first() is not None
    with engine.begin() as conn:
        conn.execute(CLAIM_SQLITE, values)
        return conn.execute(RECORD_SQLITE, values).rowcount == 1


def _values(key: str, function: str, job: dict[str, Any], at: dt.datetime) -> dict[str, Any]:
    return {"key": key, "at": at, "function": function, "request": json.dumps(job, separators=(",", ":"))}


@functools.lru_cache(maxsize=BATCH)
def _batch_sql(jobs: int) -> str:
    """The claims and jobs of ``jobs`` acknowledgements in one statement, in the driver's own placeholders: each
    job's (key, function, request, time) in order. The job's row exists only if its claim was won, and both rows
    carry the job's own time (the order the worker takes jobs in)."""
    listed = ", ".join(["(%s, %s, CAST(%s AS JSON), CAST(%s AS TIMESTAMPTZ))"] * jobs)
    return (f"WITH jobs (key, function, request, at) AS (VALUES {listed}), "
            "claimed AS (INSERT INTO slack_deliveries (key, received_at) SELECT key, at FROM jobs "
            "ON CONFLICT (key) DO NOTHING RETURNING key), "
            "recorded AS (INSERT INTO slack_work (created_at, function, request, attempts) "
            "SELECT jobs.at, jobs.function, jobs.request, 0 FROM jobs JOIN claimed ON claimed.key = jobs.key) "
            "SELECT key FROM claimed")


class JobRecorder:
    """:func:`claim_and_record` for the acknowledgement's path: the jobs of concurrent acknowledgements in one
    statement (PostgreSQL) or one transaction (SQLite).

    One writer thread: each round takes every job waiting then, so fifty requests at once cost a few commits, not
    fifty, and on SQLite the process's request threads never wait on each other for the file's write lock (SQLite's
    busy handler sleeps in steps of up to 100 ms). On PostgreSQL the writer has a
    connection of its own, kept open in autocommit (a pooled connection is pinged each time it is taken from the
    pool). The statement goes to the driver's cursor directly: it is the answering
    process's one statement per acknowledgement, and SQLAlchemy's work around a statement (building, compiling
    and binding it, reading its result) cost that process more of its interpreter than the driver's round trip
    (the driver still prepares it once it repeats). A caller waits ``wait_seconds`` at most (a database that hangs
    must not hold the acknowledgement); a connection that fails is dropped and the next round opens another.
    """

    def __init__(self, engine: Engine, wait_seconds: float) -> None:
        self.engine = engine
        self.wait_seconds = wait_seconds
        self._waiting: list[tuple[dict[str, Any], Future[bool]]] = []
        self._ready = threading.Condition()
        self._closed = False
        self._conn: Connection | None = None
        self._cursor: Any = None  # the driver's cursor on ``_conn`` (psycopg's, on PostgreSQL)
        self._writer = threading.Thread(target=self._write, name="kimi-record", daemon=True)
        self._writer.start()

    def record(self, key: str, function: str, job: dict[str, Any], at: dt.datetime) -> bool:
        done: Future[bool] = Future()
        with self._ready:
            self._waiting.append((_values(key, function, job, at), done))
            self._ready.notify()
        try:
            return done.result(timeout=self.wait_seconds)
        except TimeoutError:
            # The caller spools the job instead; a write not yet begun must not record it here as well, or the copy
            # that runs would be the one without the spool's "queued" notice.
            done.cancel()
            raise

    def _write(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._waiting or self._closed)
                if self._closed:
                    return
                batch, self._waiting = self._waiting[:BATCH], self._waiting[BATCH:]
            batch = [(values, done) for values, done in batch if done.set_running_or_notify_cancel()]
            try:
                claimed = self._claim_and_record([values for values, _ in batch])
            except Exception as exc:
                self._drop_connection()
                for _, done in batch:
                    done.set_exception(exc)
                continue
            seen: set[str] = set()
            for values, done in batch:  # a key twice in one round: the first is the request, the second a copy
                done.set_result(values["key"] in claimed and values["key"] not in seen)
                seen.add(values["key"])

    def _claim_and_record(self, batch: list[dict[str, Any]]) -> set[str]:
        """The keys of ``batch`` claimed now (a key already claimed, or twice in it, is recorded once or not at all)."""
        if self.engine.dialect.name != "postgresql":
            claimed: set[str] = set()
            with self.engine.begin() as conn:  # one commit for the round; each job keeps its own time
                for values in batch:
                    conn.execute(CLAIM_SQLITE, values)
                    if conn.execute(RECORD_SQLITE, values).rowcount == 1:
                        claimed.add(values["key"])
            return claimed
        if self._cursor is None:
            self._conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            self._cursor = self._conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        first: dict[str, dict[str, Any]] = {}
        for values in batch:
            first.setdefault(values["key"], values)
        params: list[Any] = []
        for values in first.values():
            params += (values["key"], values["function"], values["request"], _utc(values["at"]))
        self._cursor.execute(_batch_sql(len(first)), params)
        return {str(row[0]) for row in self._cursor.fetchall()}

    def _drop_connection(self) -> None:
        conn, self._conn, self._cursor = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.invalidate()
                conn.close()

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        self._writer.join(timeout=5)
        self._drop_connection()


def _utc(at: dt.datetime) -> dt.datetime:
    """A time as the store keeps it (:class:`bot.adapters.store.models.UTCDateTime`): aware, in UTC."""
    if at.tzinfo is None:
        raise ValueError("naive datetime given to the store; use timezone-aware UTC")
    return at.astimezone(dt.UTC)


class WorkRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, function: str, request: dict[str, Any], at: dt.datetime) -> None:
        # A Core insert: the acknowledgement path pays for one statement, not for an ORM flush.
        self.session.execute(insert(SlackWork).values(created_at=at, function=function, request=request, attempts=0))

    def take(self, holder: str, now: dt.datetime, until: dt.datetime) -> tuple[int, str, dict[str, Any], int] | None:
        """The oldest free row, now held by ``holder`` until ``until`` (id, function, request, attempts); None if none.

        One statement: the ``UPDATE`` picks its row with a subquery and returns it (both SQLite and PostgreSQL
        have ``RETURNING``); the ORM is told not to look for loaded rows to update (none are: nothing here loads
        a ``SlackWork`` object), which was half of a take's cost.
        """
        free = or_(SlackWork.lease_until.is_(None), SlackWork.lease_until <= now)
        candidate = select(SlackWork.id).where(free).order_by(SlackWork.id).limit(1)
        if self.session.get_bind().dialect.name == "postgresql":
            candidate = candidate.with_for_update(skip_locked=True)
        row = self.session.execute(
            update(SlackWork).where(SlackWork.id == candidate.scalar_subquery(), free)
            .values(holder=holder, lease_until=until, attempts=SlackWork.attempts + 1)
            .returning(SlackWork.id, SlackWork.function, SlackWork.request, SlackWork.attempts)
            .execution_options(synchronize_session=False)).one_or_none()
        return None if row is None else (row.id, row.function, row.request, row.attempts)

    def renew(self, holder: str, ids: Sequence[int], until: dt.datetime) -> None:
        if ids:
            self.session.execute(update(SlackWork).where(SlackWork.id.in_(list(ids)), SlackWork.holder == holder)
                                 .values(lease_until=until).execution_options(synchronize_session=False))

    def finish(self, work_id: int, holder: str) -> bool:
        """Delete the row if ``holder`` still holds it; False when its lease lapsed and another worker took it."""
        result: CursorResult[Any] = self.session.execute(  # type: ignore[assignment]
            delete(SlackWork).where(SlackWork.id == work_id, SlackWork.holder == holder)
            .execution_options(synchronize_session=False))
        return result.rowcount == 1

    def waiting(self) -> int:
        """Rows not yet done (held or not)."""
        return len(self.session.scalars(select(SlackWork.id)).all())
