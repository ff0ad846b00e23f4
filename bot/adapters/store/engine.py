"""Engine construction with the per-dialect settings kimi-ops relies on."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

DEFAULT_POOL_SIZE = 10
DEFAULT_MAX_OVERFLOW = 10
# libpq's connection parameters on PostgreSQL, unless the URL sets them. An unroutable host fails start-up in 10 s,
# not after the OS's TCP timeout. A server that goes silently (a node lost, a partition: no reset arrives) fails an
# open connection's wait in about 10 s: keepalives when nothing is in flight (4 s idle, then 3 probes 2 s apart),
# tcp_user_timeout when what was sent is not acknowledged. Without them a query, or the pool's pre-ping, waits for
# the kernel's retries (about 15 minutes), and a stopping worker's drain of acknowledged work is cut off by its pod.
POSTGRES_CONNECT_ARGS: dict[str, int] = {
    "connect_timeout": 10, "keepalives": 1, "keepalives_idle": 4, "keepalives_interval": 2, "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}


def make_engine(url: str, *, pool_size: int = DEFAULT_POOL_SIZE, max_overflow: int = DEFAULT_MAX_OVERFLOW,
                **kwargs: Any) -> Engine:
    """Create an engine; SQLite gets foreign keys, WAL and a busy timeout.

    On PostgreSQL the process opens at most ``pool_size + max_overflow`` connections through this engine
    (the leader lock and the scheduler's job store draw from the same pool), and a connection attempt, or a
    wait on a server gone silent, gives up after about 10 s (:data:`POSTGRES_CONNECT_ARGS`).
    """
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    given = make_url(url).query
    kwargs.setdefault("connect_args", {k: v for k, v in POSTGRES_CONNECT_ARGS.items() if k not in given})
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, pool_size=pool_size, max_overflow=max_overflow, **kwargs)


def bound_sqlite_waits(engine: Engine, seconds: float) -> bool:
    """On SQLite, wait at most ``seconds`` for the write lock on this engine's new connections; False elsewhere.

    The process that answers Slack must answer within 3 seconds: its few writes give up rather than queue
    behind another process's long transaction (the default wait is 30 s).
    """
    if engine.dialect.name != "sqlite":
        return False

    @event.listens_for(engine, "connect")
    def _short_wait(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout={int(seconds * 1000)}")
        cursor.close()

    engine.dispose()  # connections made before this keep the long wait: start afresh
    return True


def display_url(url: str) -> str:
    """The URL with any password masked, fit for messages and logs."""
    return make_url(url).render_as_string(hide_password=True)
