"""Shared fixtures: real SQLite and real PostgreSQL databases, migrated by Alembic.

PostgreSQL comes from ``KIMI_TEST_POSTGRES_URL`` (``.ci/run`` sets it to a throwaway
database); every test that asks for it gets a fresh database created on that server.
Under CI a missing or unreachable server is an error, never a skip.

Every test starts with no ``SLACK_*``, ``AWS_*`` or ``KIMI_*`` variable from the
machine (a developer's real token or profile must never reach a test), and the
artifact tests share one moto server per process (per xdist worker), reset
before each test. Everything a test creates lives under its own ``tmp_path``, a
uniquely named database or an ephemeral port, so the suite runs in parallel.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from bot.adapters.clock import FrozenClock
from bot.adapters.store import schema
from bot.bootstrap import build_context
from bot.config import load_settings
from bot.services.context import Context, Ports

# The moto fixtures live beside the artifact helpers; importing them here offers them to every test module.
from tests.artifact_support import EXAMPLE_RELEASE as EXAMPLE_RELEASE
from tests.artifact_support import moto as moto
from tests.artifact_support import moto_server as moto_server
from tests.artifact_support import seeded as seeded

DEFAULT_PG = "postgresql+psycopg://root@127.0.0.1:5432/root"
# Read once, before any test clears the environment: the session's PostgreSQL server for the fixtures below.
TEST_POSTGRES_URL = os.environ.get("KIMI_TEST_POSTGRES_URL", DEFAULT_PG)
MACHINE_PREFIXES = ("SLACK_", "AWS_", "KIMI_")
START = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_machine_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clear Slack, AWS and kimi-ops settings inherited from the machine; a test sets what it needs."""
    for name in list(os.environ):
        if name.startswith(MACHINE_PREFIXES):
            monkeypatch.delenv(name)


def _pg_admin_url() -> str:
    url = TEST_POSTGRES_URL
    return url.replace("postgresql://", "postgresql+psycopg://", 1) if url.startswith("postgresql://") else url


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    url = _pg_admin_url()
    try:
        engine = create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
    except Exception as exc:  # pragma: no cover - depends on the machine
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL at {url} is required in CI and is not reachable: {exc}")
        pytest.skip(f"PostgreSQL not reachable at {url} (set KIMI_TEST_POSTGRES_URL): {exc}")
    return url


@contextmanager
def _fresh_database(admin_url: str) -> Iterator[str]:
    name = f"kimi_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture()
def fresh_pg_url(pg_admin_url: str) -> Iterator[str]:
    """A brand-new, empty PostgreSQL database for one test; dropped afterwards."""
    with _fresh_database(pg_admin_url) as url:
        yield url


@pytest.fixture(scope="module")
def module_pg_url(pg_admin_url: str) -> Iterator[str]:
    """A brand-new, empty PostgreSQL database shared by one module's tests (expensive set-ups, e.g. replicas)."""
    with _fresh_database(pg_admin_url) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each kind (no schema yet)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'kimi.db'}"
    return request.getfixturevalue("fresh_pg_url")


@pytest.fixture()
def db_url(empty_db_url: str) -> str:
    """A database of each kind, migrated to head."""
    schema.upgrade(empty_db_url)
    return empty_db_url


@pytest.fixture()
def clock() -> FrozenClock:
    return FrozenClock(START)


@pytest.fixture()
def make_ctx(db_url: str, clock: FrozenClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Build a Context on the migrated database, with optional ``ports`` and settings overrides."""
    monkeypatch.delenv("KIMI_CONFIG", raising=False)
    contexts: list[Context] = []

    def factory(*, ports: Ports | None = None, **overrides: object) -> Context:
        overrides.setdefault("database_url", db_url)
        overrides.setdefault("data_dir", tmp_path / "data")
        ctx = build_context(load_settings(**overrides), clock=clock, ports=ports)
        contexts.append(ctx)
        return ctx

    yield factory
    for ctx in contexts:
        ctx.close()


@pytest.fixture()
def ctx(make_ctx) -> Context:
    return make_ctx()


def with_ports(ctx: Context, **ports: object) -> Context:
    """``ctx`` with the named ports replaced (same database, settings and clock); the Context itself is immutable."""
    return replace(ctx, ports=replace(ctx.ports, **ports))
