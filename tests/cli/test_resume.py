"""``kimi-ops resume`` says what it did: which deployments it took over, and for each one it left, why.

It exits 1 when deployments needed driving and it could take none of them (another replica's lease is alive),
so a script restarting kimi-ops after a crash learns that it has to wait, and for how long.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bot.cli.main import app
from bot.services.deployments import cancel, get_deployment, request_deploy
from bot.services.engine import Engine
from bot.services.releases import register_release
from tests.workflow_support import ADMIN, REQUESTER, ROLES, endpoint_config, fake_ports, release_data

runner = CliRunner()


@pytest.fixture()
def world(make_ctx, db_url: str, tmp_path: Path):
    """kimi-prod's deploy waits at its artifact gate; kimi-dev's was just requested and needs driving."""
    endpoints = [endpoint_config(), endpoint_config("kimi-dev", environment="dev")]
    ctx = make_ctx(endpoints=endpoints, roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    waiting = Engine(ctx, readiness_pause=0).advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    assert waiting.pending is not None
    needs_driving = request_deploy(ctx, "rel-a", "kimi-dev", REQUESTER)
    env = {
        "KIMI_DATABASE_URL": db_url, "KIMI_DATA_DIR": str(tmp_path / "cli"), "KIMI_ENDPOINTS": json.dumps(endpoints),
        "KIMI_ROLES": json.dumps(ROLES), "KIMI_CLI_USER": "U0ADMIN",
        # Nothing answers here: the artifact gate's AWS calls fail at once (an errored check, still a report).
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "1", "AWS_EC2_METADATA_DISABLED": "true",
    }
    return ctx, env, waiting.id, needs_driving.id


def _lease(ctx, deployment_id: int, holder: str, seconds: float) -> None:
    """``holder`` drives the deployment's endpoint for ``seconds`` more (negative: its lease lapsed)."""
    now = dt.datetime.now(dt.UTC)
    with ctx.uow() as uow:
        dep = uow.deployments.get(deployment_id)
        assert uow.leases.claim(dep.endpoint_id, dep.id, holder, now - dt.timedelta(seconds=120),
                                now + dt.timedelta(seconds=seconds))
        uow.commit()


def test_resume_says_which_it_left_and_why_and_exits_1_when_it_could_take_none(world) -> None:
    ctx, env, waiting, needs_driving = world
    _lease(ctx, needs_driving, "replica-x", 90)

    left = runner.invoke(app, ["resume"], env=env)
    assert left.exit_code == 1, left.output
    said = re.search(rf"left deployment #{needs_driving}: it is driven by replica-x until (\d\d:\d\d:\d\d) UTC; "
                     r"it lapses in (\d+) s", left.output)
    assert said is not None, left.output
    assert 60 <= int(said.group(2)) <= 90
    assert f"left deployment #{waiting}: it waits for a person at artifact gate" in left.output
    assert get_deployment(ctx, needs_driving).state == "requested"  # not touched: another replica drives it

    _lease(ctx, needs_driving, "replica-x", -1)  # replica-x died: its lease lapsed
    took = runner.invoke(app, ["resume"], env=env)
    assert took.exit_code == 0, took.output
    assert f"took deployment #{needs_driving} over" in took.output
    assert f"deployment #{needs_driving}:" in took.output
    assert get_deployment(ctx, needs_driving).state == "artifact_gate"

    again = runner.invoke(app, ["resume"], env=env)  # everything in flight now waits for a person: nothing to do
    assert again.exit_code == 0, again.output
    assert again.output.count("waits for a person") == 2

    for deployment_id in (waiting, needs_driving):
        cancel(ctx, deployment_id, ADMIN)
    nothing = runner.invoke(app, ["resume"], env=env)
    assert nothing.exit_code == 0 and "no deployment in flight" in nothing.output
