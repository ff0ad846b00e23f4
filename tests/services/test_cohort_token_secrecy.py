"""The internal cohort's token after a whole deploy in the sandbox: in its Secret and the route's match, nowhere else.

A deploy closes the route (a new token), lets the internal cohort in with it, ramps and opens; every Slack post
about it is delivered to the stub and read back with ``/kimi status`` and ``/kimi history``. The token must not be
in any row of any table (audit, events, deployments' stored manifests and reports, the outbox), in any log line of
the process at DEBUG, or in any Web API call or response_url post.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from bot.cli.shell import Shell
from bot.sandbox.stack import APPROVER_1, CHANNEL, ENDPOINT, GROUPS
from tests.exposure_support import World, start_world


@pytest.fixture(params=["sqlite", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    url = request.getfixturevalue("fresh_pg_url") if request.param == "postgres" else None
    w = start_world(tmp_path / "sandbox", database_url=url, users_per_second=16.0,
                    ramp={"steps": [50], "soak_seconds": 1.0, "sample_seconds": 0.5})
    try:
        yield w
    finally:
        w.sandbox.stop()


def rows_with(url: str, secret: str) -> list[str]:
    """The tables holding ``secret`` anywhere in a row."""
    engine = create_engine(url)
    try:
        with engine.connect() as db:
            tables = [r[0] for r in db.execute(text(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
                if engine.dialect.name == "postgresql" else "SELECT name FROM sqlite_master WHERE type = 'table'"))]
            return [t for t in tables if secret in repr(db.execute(text(f'SELECT * FROM "{t}"')).fetchall())]
    finally:
        engine.dispose()


def test_a_deploys_cohort_token_is_never_stored_logged_or_posted(world: World, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _, newer = world.releases
    world.deploy(newer)
    found = world.sandbox.cohort()
    assert found is not None
    _, token = found
    assert len(token) >= 40
    console = Shell(world.ctx, user=APPROVER_1, channel=CHANNEL, groups=GROUPS)
    try:
        console.app.deliver()  # every post the deploy's events make
        said = console.handle(f"/kimi status {ENDPOINT}") + console.handle(f"/kimi history {ENDPOINT}")
        assert said
        assert console.app.wait_idle(30)
        assert not [c.method for c in console.stub.calls if token in json.dumps(c.params, default=str)]
        assert token not in "\n".join(said)
    finally:
        console.close()
    assert rows_with(world.ctx.settings.effective_database_url, token) == []
    assert not [r.name for r in caplog.records if token in r.getMessage()]
