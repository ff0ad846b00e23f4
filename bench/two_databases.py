"""The two databases a bench measures on: a SQLite file, or a fresh database on a PostgreSQL server.

Shared by the benches that report both (``history_scale.py``, ``fleet_scale.py``): each measurement gets a database
of its own, made empty and dropped after, so no run reads another's rows.
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

DEFAULT_POSTGRES = os.environ.get("KIMI_BENCH_POSTGRES_URL", "postgresql+psycopg://root@127.0.0.1:5432/root")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="an admin URL of a PostgreSQL server")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")


def backends(args: argparse.Namespace) -> list[str]:
    """SQLite, and PostgreSQL unless left out or unreachable."""
    return ["sqlite"] + ([] if args.no_postgres or not reachable(args.postgres) else ["postgresql"])


def database(backend: str, args: argparse.Namespace, tmp: Path, label: str) -> AbstractContextManager[str]:
    """An empty database's URL for one measurement, named by ``label``."""
    return sqlite_url(tmp, label) if backend == "sqlite" else postgres_url(args.postgres, label)


@contextmanager
def sqlite_url(tmp: Path, label: str) -> Iterator[str]:
    yield f"sqlite:///{tmp / f'bench-{label}.db'}"


@contextmanager
def postgres_url(admin: str, label: str) -> Iterator[str]:
    name = f"kimi_bench_{label}_{uuid.uuid4().hex[:8]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin).set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


def reachable(admin: str) -> bool:
    """Whether the PostgreSQL server at ``admin`` answers a query within a few seconds."""
    engine = create_engine(admin, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return True
    except OperationalError:
        return False
    finally:
        engine.dispose()
