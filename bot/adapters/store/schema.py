"""Schema version management over Alembic: upgrade, downgrade, current, and the start-up check.

Every process checks the schema at start, and ``/readyz`` at every probe; Alembic (about 0.4 s to import, and it
imports every migration to find the head) is loaded only to change the schema or when the check fails. The check
itself reads the head from the migration files' ``revision``/``down_revision`` lines and the current revision with
one query; a test keeps the quick head equal to Alembic's.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import InterfaceError, OperationalError

import migrations
from bot.config_error import ConfigError

if TYPE_CHECKING:
    from alembic.config import Config

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
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migrations have {len(heads)} heads; merge them")
    return heads[0]


_REVISION = re.compile(r"^revision(?:\s*:\s*str)?\s*=\s*['\"]([^'\"]+)['\"]", re.M)
_DOWN = re.compile(r"^down_revision(?:\s*:\s*[^=]+)?\s*=\s*(?:['\"]([^'\"]+)['\"]|None)", re.M)


@cache
def quick_head() -> str:
    """The head revision read from the version files' own lines, without importing Alembic or them.

    Falls back to Alembic for anything it cannot read plainly (a merge revision's tuple, several heads).
    """
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        source = path.read_text()
        revision, down = _REVISION.search(source), _DOWN.search(source)
        if revision is None or down is None:
            return head_revision()
        revisions.add(revision.group(1))
        if down.group(1):
            parents.add(down.group(1))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else head_revision()


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
    from alembic.runtime.migration import MigrationContext

    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except (OperationalError, InterfaceError) as exc:
        raise DatabaseUnreachable.of(engine.url.render_as_string(hide_password=False), exc) from None


def stored_revision(engine: Engine) -> str | None:
    """The stored revision with one query, as Alembic stores it (table ``alembic_version``, one row at one head)."""
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return None
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    except (OperationalError, InterfaceError) as exc:
        raise DatabaseUnreachable.of(engine.url.render_as_string(hide_password=False), exc) from None
    return rows[0] if len(rows) == 1 else current_revision(engine)  # several heads: Alembic's own answer


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    try:
        command.upgrade(alembic_config(url), revision)
    except (OperationalError, InterfaceError) as exc:
        raise DatabaseUnreachable.of(url, exc) from None


_MIGRATED_SQLITE: dict[str, Path] = {}  # head revision -> an empty SQLite file this process migrated to it


def new_sqlite_at_head(path: Path) -> None:
    """A new SQLite database at ``path``, at the schema's head: a copy of an empty one this process migrated before.

    The migrations always build the same empty file, and running them costs a quarter of a CPU-second; a test run
    makes hundreds of these per process (the test fixtures' databases and the sandboxes).
    """
    path.unlink(missing_ok=True)
    head = quick_head()
    template = _MIGRATED_SQLITE.get(head)
    if template is None or not template.exists():
        upgrade(f"sqlite:///{path}")
        folder = Path(tempfile.mkdtemp(prefix="kimi-ops-schema-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        template = _MIGRATED_SQLITE[head] = folder / "migrated.db"
        shutil.copyfile(path, template)
        return
    shutil.copyfile(template, path)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


def check_schema(engine: Engine, auto_migrate: bool = False) -> None:
    """Refuse to run against a schema that is behind or ahead of the code."""
    if stored_revision(engine) == quick_head():
        return  # the usual case: no Alembic
    from alembic.script import ScriptDirectory

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
