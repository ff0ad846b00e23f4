"""A replica's local spool: the Slack follow-ups its answering process acknowledged, until its worker takes them on.

One SQLite file in the replica's data directory, used through the stdlib ``sqlite3`` module (no SQLAlchemy, no
pool: a commit here costs tens of microseconds) in WAL mode with ``synchronous=NORMAL``, so a committed row
survives the process being killed (only a power cut can lose the last ones). The answering process writes it;
the worker process beside it reads it and deletes what it has moved into the shared database. Nothing here
is shared between replicas: the shared database still decides which replica runs a request
(:func:`bot.services.followups.accept`).

Two tables: ``seen`` holds each request key this replica acknowledged (an exact replay to the same replica is
refused in the acknowledgement, without asking the shared database), with ``claimed`` set once this replica
won the request's claim in the shared database itself; ``items`` holds each lazy listener's run, in order. A
trigger notes an item's key in ``seen`` as the item is written: the acknowledgement of a request with work to
spool costs one local commit, not two.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, at REAL NOT NULL, claimed INTEGER)",
    "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, "
    "function TEXT NOT NULL, request TEXT NOT NULL, at REAL NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS items_seen AFTER INSERT ON items "
    "BEGIN INSERT OR IGNORE INTO seen (key, at) VALUES (NEW.key, NEW.at); END",
)
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
    """The spool file at ``path``; one connection per thread (sqlite3 connections are not shared across threads)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._db() as db:
            for statement in SCHEMA:
                db.execute(statement)

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=BUSY_MS / 1000, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def first(self, key: str) -> bool:
        """Note ``key`` as acknowledged here: ``True`` the first time, ``False`` for a copy this replica saw."""
        return self._db().execute("INSERT OR IGNORE INTO seen (key, at) VALUES (?, ?)",
                                  (key, time.time())).rowcount == 1

    def seen_since(self, seconds_ago: float) -> dict[str, float]:
        """The keys acknowledged here in the last ``seconds_ago`` seconds, with when (epoch seconds)."""
        rows = self._db().execute("SELECT key, at FROM seen WHERE at >= ?", (time.time() - seconds_ago,)).fetchall()
        return {str(key): float(at) for key, at in rows}

    def mark_claimed(self, key: str) -> None:
        """This replica won ``key`` in the shared database (its spooled items need no claim of their own)."""
        self._db().execute(MARK_CLAIMED, (key, time.time()))

    def add(self, key: str, function: str, request: dict[str, Any]) -> None:
        """Spool one run of request ``key`` (noting ``key`` as acknowledged here too, in the same commit)."""
        self._db().execute("INSERT INTO items (key, function, request, at) VALUES (?, ?, ?, ?)",
                           (key, function, json.dumps(request, separators=(",", ":")), time.time()))

    def pending(self, limit: int = 100) -> list[SpooledItem]:
        """The oldest items, in the order they were acknowledged."""
        rows = self._db().execute(
            "SELECT items.id, items.key, items.function, items.request, seen.claimed FROM items "
            "LEFT JOIN seen ON seen.key = items.key ORDER BY items.id LIMIT ?", (limit,)).fetchall()
        return [SpooledItem(row[0], row[1], row[2], json.loads(row[3]), bool(row[4])) for row in rows]

    def moved(self, key: str, ids: list[int], *, claimed: bool) -> None:
        """Items ``ids`` of request ``key`` are in the shared database (or dropped there): delete them and, when
        this replica won the claim, note it for the request's later items; one commit."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            if claimed:
                db.execute(MARK_CLAIMED, (key, time.time()))
            if ids:
                db.execute(f"DELETE FROM items WHERE id IN ({','.join('?' * len(ids))})", ids)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def waiting(self) -> int:
        return int(self._db().execute("SELECT count(*) FROM items").fetchone()[0])

    def forget_seen_before(self, seconds_ago: float) -> int:
        """Forget keys older than ``seconds_ago`` whose items are gone (no copy of them can still be signed)."""
        return self._db().execute(
            "DELETE FROM seen WHERE at < ? AND key NOT IN (SELECT key FROM items)",
            (time.time() - seconds_ago,)).rowcount

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
