"""A terminal that drives a deployment says what happens while it happens, and stops waiting when told to."""

from __future__ import annotations

import threading

import pytest
import typer

from bot.cli.progress import drive
from bot.services.deployments import request_deploy
from tests.workflow_support import REQUESTER, workflow

pytestmark = pytest.mark.sqlite_only


def test_driving_prints_each_step_as_it_is_recorded(make_ctx, capsys) -> None:
    ctx, engine = workflow(make_ctx)
    asked = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id
    view = drive(ctx, asked, lambda: engine.advance(asked), None)
    assert view.state == "artifact_gate"
    lines = capsys.readouterr().out.splitlines()
    assert any(line.strip().endswith("→ artifact gate") for line in lines), lines
    assert all(line.startswith("  ") and line[2:10].count(":") == 2 for line in lines), lines  # "  HH:MM:SS  …"


def test_a_timeout_stops_waiting_and_says_where_the_deployment_is(make_ctx, capsys) -> None:
    ctx, engine = workflow(make_ctx)
    asked = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id
    release = threading.Event()

    def long_step():  # a step that outlasts the wait (a cold start), released when the test ends
        release.wait(60)
        return engine.advance(asked)

    try:
        with pytest.raises(typer.Exit) as stopped:
            drive(ctx, asked, long_step, 1)
    finally:
        release.set()
    assert stopped.value.exit_code == 1
    said = capsys.readouterr().err
    assert f"deployment #{asked} is still in its `requested` step after 1 s; stopped waiting" in " ".join(said.split()), said
    assert "kimi-ops resume" in said and f"kimi-ops gate show {asked}" in said
