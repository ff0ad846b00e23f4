"""The CLI's kubectl/helm conventions: plain help, ``-o table|json|yaml``, unwrapped piped tables, exit codes.

The world is made through the services on the workflow fakes; the ``kimi-ops``
commands then read the same database in this process (Typer's runner), as an
operator's terminal would, and their artifact gate talks to an AWS endpoint that
refuses connections.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import typer.main
import yaml
from typer.testing import CliRunner

from bot.cli.main import app
from bot.domain.checks import GATES
from bot.services.deployments import decide_gate, get_deployment, request_deploy
from bot.services.engine import Engine
from bot.services.governance import ExceptionRequest, ReviewRequest, record_exception, record_licence_review
from bot.services.releases import register_release
from tests.workflow_support import APPROVER_1, REQUESTER, ROLES, endpoint_config, fake_ports, release_data

# The Slack edge (or the CLI's wording) is what is tested here, not the store: SQLite only (tests/conftest.py).
pytestmark = pytest.mark.sqlite_only

runner = CliRunner()


def _paths(group: typer.main.TyperGroup, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, cmd in getattr(group, "commands", {}).items():
        found += _paths(cmd, (*path, name))
    return found


def test_help_names_arguments_and_values_as_kubectl_does() -> None:
    for path in _paths(typer.main.get_command(app)):
        shown = runner.invoke(app, [*path, "--help"]).output
        assert "<bool>" not in shown and "<str>" not in shown and "<int>" not in shown, (path, shown)
        assert "{" not in shown.split("\n\n")[0], (path, shown)  # the usage line: DEPLOYMENT, not {deployment}
    assert "Usage: kimi-ops cancel [OPTIONS] DEPLOYMENT" in runner.invoke(app, ["cancel", "--help"]).output
    assert "--as USER" in runner.invoke(app, ["deploy", "--help"]).output
    assert " | ".join(GATES) in runner.invoke(app, ["gate", "reject", "--help"]).output
    exit_codes = runner.invoke(app, ["--help"]).output
    assert "Exit codes: 0 done; 1 refused" in exit_codes and "3 the database schema" in " ".join(exit_codes.split())


@pytest.fixture()
def world(make_ctx, db_url: str, tmp_path: Path):
    """kimi-prod with one deployment rejected at its artifact gate, and the environment a terminal would have."""
    endpoints = [endpoint_config()]
    ctx = make_ctx(endpoints=endpoints, roles=ROLES, ports=fake_ports())
    for name in ("kimi-k3-2026-08-01", "kimi-k3-2026-09-01"):
        register_release(ctx, release_data(name), "U0DEPLOYER")
    engine = Engine(ctx, readiness_pause=0)
    view = engine.advance(request_deploy(ctx, "kimi-k3-2026-08-01", "kimi-prod", REQUESTER).id)
    assert view.pending is not None
    decide_gate(ctx, view.id, "artifact", "rejected", APPROVER_1, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash, reason="licence review is not finished")
    env = {
        "KIMI_DATABASE_URL": db_url, "KIMI_DATA_DIR": str(tmp_path / "cli"), "KIMI_ENDPOINTS": json.dumps(endpoints),
        "KIMI_ROLES": json.dumps(ROLES), "KIMI_CLI_USER": "U0APPROVER1",
        # Nothing answers here: an AWS call fails at once instead of waiting for credentials or retrying.
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "1", "AWS_EC2_METADATA_DISABLED": "true",
    }
    return ctx, env


def _cli(env: dict[str, str], *args: str):
    return runner.invoke(app, list(args), env=env)


def test_read_commands_print_json_and_yaml_with_stable_keys(world) -> None:
    ctx, env = world
    history = json.loads(_cli(env, "history", "-o", "json").stdout)
    assert [(d["id"], d["release"], d["state"]) for d in history] == [(1, "kimi-k3-2026-08-01", "rejected")]
    assert "licence review is not finished" in history[0]["state_reason"]
    assert history[0]["gates"][0] | {"decided_at": None} == {
        "gate": "artifact", "status": history[0]["gates"][0]["status"], "decision": "rejected",
        "decided_by": "U0APPROVER1", "decided_at": None, "reason": "licence review is not finished"}
    assert yaml.safe_load(_cli(env, "history", "--output", "YAML").stdout) == history
    releases = json.loads(_cli(env, "release", "list", "-o", "json").stdout)
    assert {r["name"] for r in releases} == {"kimi-k3-2026-08-01", "kimi-k3-2026-09-01"}
    assert set(releases[0]) == {"name", "tuple_hash", "registered_by", "registered_at", "manifest"}
    shown = yaml.safe_load(_cli(env, "release", "show", "kimi-k3-2026-09-01", "-o", "yaml").stdout)
    assert shown["manifest"]["image"].count("@sha256:") == 1 and shown["registered_at"].endswith("Z")
    report = json.loads(_cli(env, "gate", "report", "1", "artifact", "-o", "json").stdout)
    assert report["decision"] == "rejected" and report["report"]["gate"] == "artifact"
    assert json.loads(_cli(env, "gate", "show", "1", "-o", "json").stdout)["state"] == "rejected"
    assert json.loads(_cli(env, "reservations", "-o", "json").stdout) == []
    assert {j["name"] for j in json.loads(_cli(env, "jobs", "list", "-o", "json").stdout)} >= {"reservation-watch"}
    assert _cli(env, "history", "-o", "xml").exit_code == 2
    (status,) = json.loads(_cli(env, "status", "-o", "json").stdout)
    assert (status["name"], status["environment"]) == ("kimi-prod", "prod")
    assert set(yaml.safe_load(_cli(env, "status", "kimi-prod", "-o", "yaml").stdout)[0]) == set(status)
    assert json.loads(_cli(env, "drills", "kimi-prod", "-o", "json").stdout) == []
    (slo,) = json.loads(_cli(env, "slo", "kimi-prod", "-o", "json").stdout)
    assert set(slo) == {"endpoint", "window_days", "last_reading", "objectives", "open_incidents"}
    assert slo["last_reading"] is None and set(slo["objectives"][0]) == {
        "name", "bound", "budget", "burn", "budget_left", "alert"} and "5m" in slo["objectives"][0]["burn"]
    diff = yaml.safe_load(_cli(env, "release", "diff", "kimi-k3-2026-08-01", "kimi-k3-2026-09-01", "-o", "yaml").stdout)
    assert (diff["a"], diff["b"]) == ("kimi-k3-2026-08-01", "kimi-k3-2026-09-01") and "fields" in diff

    later = ctx.clock.now() + dt.timedelta(days=30)
    record_licence_review(ctx, APPROVER_1, ReviewRequest("kimi-prod", "modified-mit-2025-07", "internal", False, False,
                                                         "Kimi K3 by Moonshot AI", later))
    record_exception(ctx, APPROVER_1, ExceptionRequest("SEC-EXC-2026-0142", "unscanned-image", "release",
                                                       "kimi-k3-2026-09-01", "scanner outage", later))
    (review,) = json.loads(_cli(env, "licence", "list", "-o", "json").stdout)
    assert (review["endpoint"], review["classification"], review["reviewer"]) == ("kimi-prod", "internal", "U0APPROVER1")
    assert review["expires_at"].endswith("Z")
    (exception,) = yaml.safe_load(_cli(env, "exception", "list", "-o", "yaml").stdout)
    assert (exception["id"], exception["kind"], exception["scope"], exception["target"]) == (
        "SEC-EXC-2026-0142", "unscanned-image", "release", "kimi-k3-2026-09-01")


def test_a_piped_table_is_plain_columns_one_row_a_line(world) -> None:
    _, env = world
    lines = _cli(env, "history").stdout.splitlines()
    header = next(line for line in lines if line.startswith("#"))
    assert header.split()[:4] == ["#", "KIND", "RELEASE", "OUTCOME"] and "│" not in "".join(lines)
    row = next(line for line in lines if line.startswith("1 "))
    # Every value whole on its row (a rich table at 80 columns folded them: `kimi-k3-20 │ 26-08-01`).
    assert "kimi-k3-2026-08-01" in row and "rejected" in row and "licence review is not finished" in row


def test_gate_names_and_reasons_follow_one_rule_with_exit_2(world) -> None:
    ctx, env = world
    typo = _cli(env, "gate", "reject", "1", "artefact", "--reason", "x")
    assert typo.exit_code == 2
    assert typo.stderr.strip() == "error: no gate named artefact; the gates are artifact, infrastructure, model, traffic"
    view = _cli(env, "deploy", "kimi-k3-2026-09-01", "--as", "U0DEPLOYER")
    blank = _cli(env, "gate", "reject", "2", "ARTIFACT", "--reason", "   ")
    assert blank.exit_code == 2 and "say why the gate is rejected" in blank.stderr
    assert get_deployment(ctx, 2).state == "artifact_gate", view.output  # nothing changed


def test_exit_codes_say_whether_it_can_go_on(world) -> None:
    ctx, env = world
    # The artifact checks cannot reach S3/ECR: the gate blocks.
    blocked = _cli(env, "deploy", "kimi-k3-2026-09-01", "--as", "U0DEPLOYER")
    assert blocked.exit_code == 1, blocked.output
    assert get_deployment(ctx, 2).pending is not None and not get_deployment(ctx, 2).pending.approvable
    assert _cli(env, "release", "show", "no-such-release").exit_code == 1
    assert _cli(env, "cancel", "2", "--as", "U0DEPLOYER").exit_code == 0  # asked for and done


def test_no_endpoints_is_an_empty_listing_for_status_and_history_alike(tmp_path: Path, db_url: str) -> None:
    env = {"KIMI_DATABASE_URL": db_url, "KIMI_DATA_DIR": str(tmp_path / "cli")}
    for command in (("status",), ("history",)):
        shown = _cli(env, *command)
        assert shown.exit_code == 0 and "no endpoints" in shown.stdout, (command, shown.output)
        assert json.loads(_cli(env, *command, "-o", "json").stdout) == []
