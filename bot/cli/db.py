"""``kimi-ops db``: schema migrations of the release-history database."""

from __future__ import annotations

import typer

from bot.cli import output
from bot.cli.conventions import typer_app
from bot.cli.guard import run_guarded

app = typer_app(help="Manage the database schema (Alembic migrations).")


def _url() -> str:
    from bot.config import load_settings

    return load_settings().effective_database_url


def _safe(url: str) -> str:
    from bot.adapters.store.engine import display_url

    return display_url(url)


@app.command()
def upgrade(revision: str = typer.Argument("head", help="Target revision (default: the newest).")) -> None:
    """Upgrade the database schema to REVISION (creates the SQLite file if needed)."""
    from bot.adapters.store import schema

    def body() -> None:
        url = _url()
        schema.upgrade(url, revision)
        output.info(f"database {_safe(url)} is at {revision if revision != 'head' else schema.head_revision()}")

    run_guarded(body)


@app.command()
def downgrade(revision: str = typer.Argument(..., metavar="REVISION", help="Target revision, e.g. -1 or base.")) -> None:
    """Downgrade the database schema to REVISION."""
    from bot.adapters.store import schema

    def body() -> None:
        url = _url()
        schema.downgrade(url, revision)
        output.info(f"database {_safe(url)} downgraded to {revision}")

    run_guarded(body)


@app.command()
def current() -> None:
    """Show the database's schema revision and the one this code expects."""
    from bot.adapters.store import make_engine, schema

    def body() -> None:
        url = _url()
        engine = make_engine(url)
        try:
            rev = schema.current_revision(engine)
        finally:
            engine.dispose()
        head = schema.head_revision()
        state = "up to date" if rev == head else "run `kimi-ops db upgrade`"
        output.info(f"database: {_safe(url)}\ncurrent:  {rev or '(empty)'}\nexpected: {head} ({state})")

    run_guarded(body)
