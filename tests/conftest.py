"""Shared fixtures: real SQLite and real PostgreSQL databases, migrated by Alembic.

PostgreSQL comes from ``KIMI_TEST_POSTGRES_URL`` (``.ci/run`` sets it to a throwaway
database). A test that asks for an empty database (``empty_db_url``) gets a fresh one
created on that server; a test that asks for a migrated one (``db_url``) gets its
worker's database, migrated once and emptied before each test (a SQLite test gets a
copy of a file migrated once: ``schema.new_sqlite_at_head``), because creating and migrating a database per test
cost seconds each. Tests that each leave their world as they found it (a table of refused
requests, reads of one history) can share one per module and database: ``make_module_ctx``.
Under CI a missing or unreachable server is an error, never a skip.

Every test starts with no ``SLACK_*``, ``AWS_*`` or ``KIMI_*`` variable from the
machine (a developer's real token or profile must never reach a test), and the
artifact tests share one moto server per process (per xdist worker), reset
before each test. Everything a test creates lives under its own ``tmp_path``, a
uniquely named database or an ephemeral port, so the suite runs in parallel.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from bot.adapters.clock import FrozenClock
from bot.adapters.store import schema
from bot.adapters.store.models import Base
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
DURATIONS = REPO / "tests" / "durations.json"


# Each worker holds 600-800 thousand objects (the collected suite, its modules, its stand-ins), and at the default
# thresholds (700, 10, 10) the collector ran about 5,000 young and 20 full collections a worker in a whole run:
# 6.5-9.3 CPU-s, most of it in the full ones. At these it runs about 360 and 3: 3.3-4.7 CPU-s (a gc.callbacks timer
# in each worker, 5 December). Cycles are still collected, in larger batches; the objects left at the end were as many.
GC_THRESHOLDS = (20_000, 20, 20)


def pytest_configure(config: pytest.Config) -> None:
    gc.set_threshold(*GC_THRESHOLDS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest modules first, so the run ends with short modules on every worker instead of one long one alone.

    ``./dev test`` sends each module to one worker as a unit (``--dist loadfile``), in this order
    (``--no-loadscope-reorder``), so a module-scoped stand-in (a sandbox, the demo's run) starts once in the whole
    run. A module's length is its wall time in a recorded whole run (``tests/durations.json``, written by
    ``bench/suite_cpu.py --write-durations``); a module not recorded yet counts its longest ``timeout`` budget, so a
    new whole-stack module starts early and a new quick one runs late. Each module keeps its own order.
    (``--dist loadgroup`` would group finer, but it cannot group on pytest 9's node ids: pytest-xdist#1386.)
    """
    _sqlite_only(config, items)
    recorded: dict[str, float] = json.loads(DURATIONS.read_text())

    def budget(item: pytest.Item) -> float:
        marker = item.get_closest_marker("timeout")
        return float(marker.args[0]) if marker is not None and marker.args else 0.0

    length: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        length[module] = recorded.get(module, max(length.get(module, 0.0), budget(item)))
    items.sort(key=lambda item: -length[item.nodeid.split("::")[0]])


def _sqlite_only(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the PostgreSQL runs of modules marked ``sqlite_only``.

    The store's own tests, the engine's, the replicas' and the whole-stack tests run on both databases; a module
    marked sqlite_only tests the Slack edge or the CLI's wording, where the database only holds the scene: it runs
    once, on SQLite. The repository reads beneath it are made on PostgreSQL by those other tests; the few that only
    the Slack edge made have a test of their own in tests/adapters/test_store.py (found by comparing coverage of the store
    adapters between the two sets on PostgreSQL).
    """
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        spec = getattr(item, "callspec", None)
        on_postgres = spec is not None and "postgres" in (spec.params.get("db_url"), spec.params.get("module_db_url"))
        (dropped if on_postgres and item.get_closest_marker("sqlite_only") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(autouse=True)
def _no_machine_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clear Slack, AWS and kimi-ops settings inherited from the machine; a test sets what it needs."""
    for name in list(os.environ):
        if name.startswith(MACHINE_PREFIXES):
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _cli_contexts_closed() -> Iterator[None]:
    """Close what CLI commands run in this process (``CliRunner``) opened, as a ``kimi-ops`` process's exit would."""
    yield
    from bot.cli.common import close_contexts

    close_contexts()


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


@pytest.fixture(scope="session")
def _migrated_pg(pg_admin_url: str) -> Iterator[str]:
    """This worker's PostgreSQL database, migrated to head once."""
    name = f"kimi_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(pg_admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(pg_admin_url).set(database=name).render_as_string(hide_password=False)
    schema.upgrade(url)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


_HEAD = schema.head_revision()


# DELETE, not TRUNCATE: the tables hold one test's few rows, and TRUNCATE gives every table new files (0.15 s
# against 0.03 s, before every PostgreSQL test). Children before parents; every id sequence starts again at 1.
_EMPTY_TABLES = " ".join(f'DELETE FROM "{t.name}";' for t in reversed(Base.metadata.sorted_tables))
_RESTART_IDS = ("DO $$ DECLARE s record; BEGIN FOR s IN SELECT sequence_name FROM information_schema.sequences "
                "WHERE sequence_schema = 'public' LOOP EXECUTE 'ALTER SEQUENCE ' || quote_ident(s.sequence_name) || ' RESTART'; "
                "END LOOP; END $$;")


def _emptied(url: str) -> bool:
    """Empty every table but Alembic's, restarting ids; False when a straggler from an earlier test holds a lock."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text("SET lock_timeout = '5s'"))
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            if version != _HEAD:  # an earlier test moved the schema on purpose: build it again
                conn.execute(text("DROP SCHEMA public CASCADE"))
                conn.execute(text("CREATE SCHEMA public"))
            else:
                conn.exec_driver_sql(f"BEGIN; {_EMPTY_TABLES} {_RESTART_IDS} COMMIT;")
        if version != _HEAD:
            schema.upgrade(url)
        return True
    except OperationalError:
        return False
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database of each kind, migrated to head and empty."""
    if request.param == "sqlite":
        path = tmp_path / "kimi.db"
        schema.new_sqlite_at_head(path)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("_migrated_pg")
    if _emptied(url):
        return url
    fresh: str = request.getfixturevalue("fresh_pg_url")  # the shared one is held: this test gets its own
    schema.upgrade(fresh)
    return fresh


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


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def module_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database of each kind, migrated to head, for one module's shared world (tests that each leave it as found)."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("module-db") / "kimi.db"
        schema.new_sqlite_at_head(path)
        return f"sqlite:///{path}"
    url: str = request.getfixturevalue("module_pg_url")
    schema.upgrade(url)
    return url


@pytest.fixture(scope="module")
def make_module_ctx(module_db_url: str, tmp_path_factory: pytest.TempPathFactory):
    """``make_ctx`` for a module's shared world: contexts on :func:`module_db_url`, closed after the module's last test."""
    contexts: list[Context] = []
    with pytest.MonkeyPatch.context() as env:  # the machine's settings stay out, as for every test
        for name in [n for n in os.environ if n.startswith(MACHINE_PREFIXES)]:
            env.delenv(name)

        def factory(*, ports: Ports | None = None, **overrides: object) -> Context:
            overrides.setdefault("database_url", module_db_url)
            overrides.setdefault("data_dir", tmp_path_factory.mktemp("data"))
            ctx = build_context(load_settings(**overrides), clock=FrozenClock(START), ports=ports)
            contexts.append(ctx)
            return ctx

        yield factory
        for ctx in contexts:
            ctx.close()


def with_ports(ctx: Context, **ports: object) -> Context:
    """``ctx`` with the named ports replaced (same database, settings and clock); the Context itself is immutable."""
    return replace(ctx, ports=replace(ctx.ports, **ports))
