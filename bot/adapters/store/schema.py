"""Schema version management over Alembic: upgrade, downgrade, current, and the start-up check."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError

import migrations
from bot.config import ConfigError

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent

# Tables that belong to libraries, not to our models: APScheduler's job store shares the database.
FOREIGN_TABLES = frozenset({"apscheduler_jobs"})


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """Alembic's filter: our migrations neither create nor drop a library's table or its indexes."""
    if type_ == "table":
        return name not in FOREIGN_TABLES
    table = getattr(obj, "table", None)
    return getattr(table, "name", None) not in FOREIGN_TABLES


class SchemaMismatch(Exception):
    """The database schema is not the one this code expects; the message says what to run."""


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    heads = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migrations have {len(heads)} heads; merge them")
    return heads[0]


class DatabaseUnreachable(ConfigError):
    """The configured database does not answer; the message names it without its password."""

    @classmethod
    def of(cls, url: str, exc: Exception) -> DatabaseUnreachable:
        from bot.adapters.store.engine import display_url

        # The driver's first line says why (refused, unknown host, bad password, no such database).
        original = getattr(exc, "orig", None) or exc
        reason = (str(original).strip().splitlines() or [type(original).__name__])[0][:200]
        return cls(f"KIMI_DATABASE_URL: cannot reach the database {display_url(url)} ({reason}); check that it runs "
                   "and the URL, e.g. KIMI_DATABASE_URL=postgresql+psycopg://kimi@db.internal:5432/kimi")


def current_revision(engine: Engine) -> str | None:
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except (OperationalError, InterfaceError) as exc:
        raise DatabaseUnreachable.of(engine.url.render_as_string(hide_password=False), exc) from None


def upgrade(url: str, revision: str = "head") -> None:
    try:
        command.upgrade(alembic_config(url), revision)
    except (OperationalError, InterfaceError) as exc:
        raise DatabaseUnreachable.of(url, exc) from None


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def check_schema(engine: Engine, auto_migrate: bool = False) -> None:
    """Refuse to run against a schema that is behind or ahead of the code."""
    head = head_revision()
    current = current_revision(engine)
    if current == head:
        return
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    known = {rev.revision for rev in script.walk_revisions()}
    if current is not None and current not in known:
        raise SchemaMismatch(
            f"the database schema ({current}) is newer than this kimi-ops ({head}); upgrade kimi-ops, "
            "or run `kimi-ops db downgrade` with the newer version first"
        )
    if auto_migrate:
        upgrade(engine.url.render_as_string(hide_password=False))
        return
    where = "empty" if current is None else f"at {current}"
    raise SchemaMismatch(
        f"the database schema is {where}, behind this kimi-ops ({head}); run `kimi-ops db upgrade` "
        "(or set KIMI_AUTO_MIGRATE=1)"
    )
