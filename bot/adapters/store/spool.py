"""A replica's local spool: the Slack jobs its answering process acknowledged while the shared database did not
answer, until its worker moves them there.

One SQLite file in the replica's data directory, used through the stdlib ``sqlite3`` module (no SQLAlchemy, no
pool: a commit here costs tens of microseconds) in WAL mode with ``synchronous=NORMAL``, so a committed row
survives the process being killed (only a power cut can lose the last ones). The answering process writes it;
the worker process beside it reads it and deletes what it has moved into the shared database. Nothing here
is shared between replicas: the shared database still decides which replica runs a request
(:func:`bot.services.followups.accept`).

Two tables: ``seen`` holds each request key this replica acknowledged (an exact replay to the same replica is
refused in the acknowledgement, without asking the shared database), with ``claimed`` set once this replica
won the request's claim in the shared database itself; ``items`` holds each spooled job, in order (a job in the
shared database is not here at all). The answering process notes every request it let through in ``seen``
(:meth:`Spool.first`); a spooled job's key is noted there again by the worker as it moves it.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, at REAL NOT NULL, claimed INTEGER)",
    # A plain rowid (no AUTOINCREMENT, whose counter is one more page to write per item): a new item's id is
    # still above every waiting one, and an id comes back only once the worker deleted its item. Spools made
    # with AUTOINCREMENT keep it, and work alike.
    "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, key TEXT NOT NULL, "
    "function TEXT NOT NULL, request TEXT NOT NULL, at REAL NOT NULL)",
)
NOTE_SEEN = "INSERT OR IGNORE INTO seen (key, at) VALUES (?, ?)"
MARK_CLAIMED = "INSERT INTO seen (key, at, claimed) VALUES (?, ?, 1) ON CONFLICT (key) DO UPDATE SET claimed = 1"
BUSY_MS = 1500  # the answering process never waits longer than the replay guard did for the shared database


@dataclass(frozen=True)
class SpooledItem:
    id: int
    key: str
    function: str
    request: dict[str, Any]
    claimed: bool  # this replica already won the request's claim in the shared database


class Spool:
    """The spool file at ``path``, through one connection this process's threads take turns on.

    One connection, not one per thread: a connection keeps its page cache only while no other connection
    writes, so a fresh connection per request thread (waitress hands consecutive requests to different
    threads) re-read the tables at every commit; and threads that find SQLite's write lock taken each sleep
    out its busy handler (a millisecond at least), where waiting on a lock here wakes them as it is released.
    """

    def __init__(self, path: Path, *, busy_ms: int = BUSY_MS) -> None:
        self.path = path
        self.busy_ms = busy_ms
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, timeout=busy_ms / 1000, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        for statement in SCHEMA:
            self._conn.execute(statement)

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """The connection, for one thread at a time; the wait for it and SQLite's for its write lock share one
        bound (``busy_ms``), so requests queued behind a stalled writer fail side by side, not one after another."""
        started = time.monotonic()
        if not self._lock.acquire(timeout=self.busy_ms / 1000):
            raise sqlite3.OperationalError(f"the spool stayed busy for {self.busy_ms} ms")
        try:
            waited_ms = int((time.monotonic() - started) * 1000)
            if waited_ms:
                self._conn.execute(f"PRAGMA busy_timeout = {max(1, self.busy_ms - waited_ms)}")
            try:
                yield self._conn
            finally:
                if waited_ms:
                    self._conn.execute(f"PRAGMA busy_timeout = {self.busy_ms}")
        finally:
            self._lock.release()

    def first(self, key: str) -> bool:
        """Note ``key`` as acknowledged here: ``True`` the first time, ``False`` for a copy this replica saw."""
        with self._db() as db:
            return db.execute(NOTE_SEEN, (key, time.time())).rowcount == 1

    def seen_since(self, seconds_ago: float) -> dict[str, float]:
        """The keys acknowledged here in the last ``seconds_ago`` seconds, with when (epoch seconds): those noted
        in ``seen`` and those whose runs wait in ``items``."""
        with self._db() as db:
            rows = db.execute("SELECT key, at FROM seen WHERE at >= ? UNION ALL SELECT key, min(at) FROM items GROUP BY key",
                              (time.time() - seconds_ago,)).fetchall()
        return {str(key): float(at) for key, at in rows}

    def mark_claimed(self, key: str) -> None:
        """This replica won ``key`` in the shared database (its spooled items need no claim of their own)."""
        with self._db() as db:
            db.execute(MARK_CLAIMED, (key, time.time()))

    def add(self, key: str, function: str, request: dict[str, Any]) -> None:
        """Spool one run of request ``key`` (the item names ``key`` as acknowledged here until it is moved)."""
        row = (key, function, json.dumps(request, separators=(",", ":")), time.time())
        with self._db() as db:
            db.execute("INSERT INTO items (key, function, request, at) VALUES (?, ?, ?, ?)", row)

    def pending(self, limit: int = 100) -> list[SpooledItem]:
        """The oldest items, in the order they were acknowledged."""
        with self._db() as db:
            rows = db.execute(
                "SELECT items.id, items.key, items.function, items.request, seen.claimed FROM items "
                "LEFT JOIN seen ON seen.key = items.key ORDER BY items.id LIMIT ?", (limit,)).fetchall()
        return [SpooledItem(row[0], row[1], row[2], json.loads(row[3]), bool(row[4])) for row in rows]

    def moved(self, key: str, ids: list[int], *, claimed: bool) -> None:
        """Items ``ids`` of request ``key`` are in the shared database (or dropped there): delete them, note ``key``
        as acknowledged here (their rows named it until now) and, when this replica won the claim, note that for
        the request's later items; one commit."""
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(MARK_CLAIMED if claimed else NOTE_SEEN, (key, time.time()))
                if ids:
                    # The key too: an id comes back once its item is deleted, so a second mover (an orphaned
                    # worker, not yet gone) must not delete another request's item that took it.
                    db.execute(f"DELETE FROM items WHERE key = ? AND id IN ({','.join('?' * len(ids))})", [key, *ids])
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def waiting(self) -> int:
        with self._db() as db:
            return int(db.execute("SELECT count(*) FROM items").fetchone()[0])

    def forget_seen_before(self, seconds_ago: float) -> int:
        """Forget keys older than ``seconds_ago`` whose items are gone (no copy of them can still be signed)."""
        with self._db() as db:
            return db.execute("DELETE FROM seen WHERE at < ? AND key NOT IN (SELECT key FROM items)",
                              (time.time() - seconds_ago,)).rowcount

    def close(self) -> None:
        with self._lock:
            self._conn.close()
