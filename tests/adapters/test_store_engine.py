"""The engine's PostgreSQL connections, as libpq was told to make them on a real server.

A server that goes silently (a node lost, a partition: no reset ever arrives) must fail a wait in seconds, or a
stopping worker's drain of acknowledged work outlives its pod. The loss itself cannot be staged here without
dropping packets on the machine, so these tests read what each connection was opened with.
"""

from __future__ import annotations

from sqlalchemy.engine import make_url

from bot.adapters.store import make_engine
from bot.adapters.store.engine import POSTGRES_CONNECT_ARGS


def _parameters(url: str) -> dict[str, str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return dict(conn.connection.dbapi_connection.info.get_parameters())  # type: ignore[union-attr]
    finally:
        engine.dispose()


def test_a_connection_gives_up_on_a_silent_server_in_seconds(pg_admin_url: str) -> None:
    params = _parameters(pg_admin_url)

    assert params["connect_timeout"] == "10"
    assert params["tcp_user_timeout"] == "10000"  # what was sent and not acknowledged, in ms
    idle, interval, count = (int(params[k]) for k in ("keepalives_idle", "keepalives_interval", "keepalives_count"))
    assert idle + interval * count <= 10  # nothing in flight: probes find the server gone


def test_a_parameter_in_the_database_url_wins(pg_admin_url: str) -> None:
    url = make_url(pg_admin_url).update_query_dict({"connect_timeout": "3", "keepalives_idle": "30"})

    params = _parameters(url.render_as_string(hide_password=False))

    assert params["connect_timeout"] == "3" and params["keepalives_idle"] == "30"
    assert params["tcp_user_timeout"] == str(POSTGRES_CONNECT_ARGS["tcp_user_timeout"])
