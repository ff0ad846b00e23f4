"""Alembic environment: the URL comes from the caller or from kimi-ops Settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from bot.adapters.store.engine import make_engine
from bot.adapters.store.models import Base
from bot.adapters.store.schema import include_object

config = context.config
target_metadata = Base.metadata

def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from bot.config import load_settings

    return load_settings().effective_database_url


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_object=include_object,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, include_object=include_object)
    with context.begin_transaction():
        context.run_migrations()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        engine = make_engine(_url())
        with engine.connect() as conn:
            _run(conn)
        engine.dispose()
