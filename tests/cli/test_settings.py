"""The ``kimi-ops`` CLI and the Settings object, as an operator meets them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from bot.cli.main import app
from bot.config import ConfigError, load_settings
from tests.cli_support import run_in_process
from tests.conftest import EXAMPLE_RELEASE

runner = CliRunner()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIMI_")}
    env["KIMI_DATA_DIR"] = str(tmp_path / "data")
    env.update(extra)
    return env


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_in_process(list(args), {"KIMI_DATA_DIR": str(tmp_path / "data"), **env}, tmp_path)


def _all_commands(group: typer.main.TyperGroup, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    if hasattr(group, "commands"):
        for name, cmd in group.commands.items():
            found += _all_commands(cmd, (*path, name))
    return found


def test_every_command_has_help() -> None:
    root = typer.main.get_command(app)
    paths = _all_commands(root)
    assert ("release", "list") in paths and ("db", "upgrade") in paths
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage:" in result.output


def test_serve_listens_on_localhost_unless_told_and_shows_both_job_switches() -> None:
    shown = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200).output
    assert "--jobs / --no-jobs" in shown and "(default: --jobs)" in shown
    assert "(default: 127.0.0.1)" in shown


def test_the_shell_completes_commands() -> None:
    shown = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    assert "--install-completion" in shown and "--show-completion" in shown
    done = CliRunner().invoke(app, [], prog_name="kimi-ops",
                              env={"_KIMI_OPS_COMPLETE": "complete_bash", "COMP_WORDS": "kimi-ops gate ap", "COMP_CWORD": "2"})
    assert done.output.split() == ["approve"]


def test_version(tmp_path: Path) -> None:
    result = _run(tmp_path, "--version")
    assert result.returncode == 0 and result.stdout.startswith("kimi-ops ")


def test_quickstart_path_on_embedded_sqlite(tmp_path: Path) -> None:
    assert _run(tmp_path, "db", "upgrade").returncode == 0
    assert (tmp_path / "data" / "kimi-ops.db").exists()
    registered = _run(tmp_path, "release", "register", str(EXAMPLE_RELEASE), "--as", "U0DEPLOYER")
    assert registered.returncode == 0, registered.stderr
    listed = _run(tmp_path, "release", "list")
    assert "kimi-k3-2026-08-01" in listed.stdout.replace("\n", "").replace("│", "").replace(" ", "") or "kimi-k3" in listed.stdout
    shown = _run(tmp_path, "release", "show", "kimi-k3-2026-08-01")
    assert "SEC-EXC-2026-0142" in shown.stdout
    missing = _run(tmp_path, "release", "show", "nope")
    assert missing.returncode == 1 and "no release named nope" in missing.stderr


def test_bad_setting_stops_with_one_line_and_exit_2(tmp_path: Path) -> None:
    result = _run(tmp_path, "release", "list", KIMI_DATABASE_URL="mysql://db/x")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: KIMI_DATABASE_URL:")
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("name, value, said", [
    ("KIMI_PROBE_CONCURRENCY", "lots", "KIMI_PROBE_CONCURRENCY: 'lots' is not a whole number; e.g. KIMI_PROBE_CONCURRENCY=16"),
    ("KIMI_PROBE_CONCURRENCY", "-3", "KIMI_PROBE_CONCURRENCY: -3 is too small: it must be at least 1; e.g. "
                                     "KIMI_PROBE_CONCURRENCY=16"),
    ("KIMI_DB_POOL_SIZE", "x", "KIMI_DB_POOL_SIZE: 'x' is not a whole number; e.g. KIMI_DB_POOL_SIZE=10"),
    ("KIMI_LEASE_SECONDS", "soon", "KIMI_LEASE_SECONDS: 'soon' is not a number; e.g. KIMI_LEASE_SECONDS=15"),
])
def test_a_bad_number_setting_says_what_a_good_value_looks_like(monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                                                                said: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert str(refused.value) == said


def test_every_number_setting_has_an_example() -> None:
    from bot.config.loading import describe
    from bot.config.settings import Settings

    for name, field in Settings.model_fields.items():
        if field.annotation in (int, float):
            assert "; e.g. KIMI_" in describe({"loc": (name,), "msg": "bad", "type": "int_parsing", "input": "x"}), name


def test_bad_config_file_names_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "kimi.yaml"
    cfg.write_text("endpoints:\n  - name: Bad_Name\n")
    result = _run(tmp_path, "release", "list", KIMI_CONFIG=str(cfg))
    assert result.returncode == 2
    assert "KIMI_CONFIG endpoints.0.name" in result.stderr and "Traceback" not in result.stderr
    missing = _run(tmp_path, "release", "list", KIMI_CONFIG=str(tmp_path / "absent.yaml"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_schema_behind_refuses_to_start(tmp_path: Path) -> None:
    result = _run(tmp_path, "release", "list")
    assert result.returncode == 3 and "kimi-ops db upgrade" in result.stderr
    auto = _run(tmp_path, "release", "list", KIMI_AUTO_MIGRATE="1")
    assert auto.returncode == 0, auto.stderr


def test_invalid_manifest_lists_every_problem_and_stores_nothing(tmp_path: Path) -> None:
    _run(tmp_path, "db", "upgrade")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        EXAMPLE_RELEASE.read_text()
        .replace("3f7c2a9e41d0b85c6a1e9f2d47b03c58e6a9d114\nweights", "main\nweights")
        .replace("vllm-openai@sha256:4e6f8a0b2c4d6e8f0a1b3c5d7e9f1a2b4c6d8e0f2a3b5c7d9e1f3a4b6c8d0e2f", "vllm-openai:kimi-k3")
    )
    result = _run(tmp_path, "release", "register", str(bad))
    assert result.returncode == 2
    assert "model.commit" in result.stderr and "image" in result.stderr and "floating tag" in result.stderr
    assert "no releases registered" in _run(tmp_path, "release", "list").stdout


def test_settings_yaml_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "kimi.yaml"
    cfg.write_text("endpoints:\n  - name: kimi-k3-prod\n    kind: eks\n    environment: prod\n"
                   "    route: {gateway: {name: kimi-gateway}}\n"
                   "roles:\n  approver: [U1]\nlog_format: json\n")
    monkeypatch.setenv("KIMI_CONFIG", str(cfg))
    monkeypatch.setenv("KIMI_LOG_FORMAT", "text")
    monkeypatch.setenv("KIMI_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.delenv("KIMI_DATABASE_URL", raising=False)
    settings = load_settings()
    assert settings.log_format == "text"  # the environment wins over the file
    assert settings.endpoint("kimi-k3-prod").requires_separate_approver is True
    assert settings.roles.approver == ["U1"]
    assert settings.effective_database_url.endswith("/d/kimi-ops.db")
    monkeypatch.setenv("KIMI_READINESS_FAILURES_TO_ALERT", "zero")
    with pytest.raises(ConfigError, match=r"^KIMI_READINESS_FAILURES_TO_ALERT: "):
        load_settings()


def test_the_cli_honours_a_role_granted_through_a_slack_user_group(tmp_path: Path) -> None:
    from bot.sandbox.slack_stub import SlackStub

    config = tmp_path / "kimi.yaml"
    config.write_text(
        "endpoints:\n  - name: kimi-dev\n    environment: dev\n    url: http://127.0.0.1:9\n"
        "roles:\n  deployer: [S0PLATFORM]\n"
    )
    register = runner.invoke(app, ["release", "register", str(EXAMPLE_RELEASE), "--as", "cli:test"],
                             env=_cli_env(tmp_path, config))
    assert register.exit_code == 0, register.output
    with SlackStub(groups={"S0PLATFORM": ["U0GROUPIE"]}) as stub:
        without_token = runner.invoke(app, ["deploy", "kimi-k3-2026-08-01", "--as", "U0GROUPIE"], env=_cli_env(tmp_path, config))
        assert without_token.exit_code != 0 and "you need the deployer role" in without_token.output
        with_token = runner.invoke(app, ["deploy", "kimi-k3-2026-08-01", "--as", "U0GROUPIE"],
                                   env=_cli_env(tmp_path, config, SLACK_BOT_TOKEN="xoxb-cli", KIMI_SLACK_API_URL=stub.api_url))
        # Let in, and its first gate blocked (AWS cannot be reached): exit 1, as for any check that fails.
        assert with_token.exit_code == 1, with_token.output
        assert "deployment #1: deploy of kimi-k3-2026-08-01 to kimi-dev — artifact gate" in with_token.output
        # The CLI's production S3/ECR verifier really asked (and could not reach) AWS: an error, never a pass.
        assert "ERROR weights.objects: could not be checked" in with_token.output
        assert [c.params.get("usergroup") for c in stub.calls_to("usergroups.users.list")] == ["S0PLATFORM"]


def _cli_env(tmp_path: Path, config: Path, **extra: str) -> dict[str, str]:
    # No AWS account: the artifact checks fail fast against an unroutable endpoint instead of looking for credentials.
    return _env(tmp_path, KIMI_CONFIG=str(config), KIMI_AUTO_MIGRATE="1", AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x",
                AWS_ENDPOINT_URL="http://127.0.0.1:9", KUBECONFIG=str(tmp_path / "none"), **extra)


LAZY_PROBE = """
import sys
from bot.bootstrap import build_context
from bot.services.deployments import history
heavy = ("boto3", "botocore", "kubernetes", "kubernetes_validate", "alembic", "jsonschema")
ctx = build_context(connect=True)
history(ctx, "kimi-prod", 5)
print(" ".join(sorted(m for m in heavy if m in sys.modules)) or "-")
ctx.ports.reservations.client  # the first use of the AWS port builds it, importing boto3 then
print(" ".join(sorted(m for m in heavy if m in sys.modules)) or "-")
"""


def test_a_command_that_reaches_no_aws_or_cluster_imports_neither(tmp_path: Path) -> None:
    """Adapters are built on first use: reading history loads no boto3, kubernetes or Alembic (start-up time)."""
    from bot.adapters.store import schema

    env = _env(tmp_path, KIMI_ENDPOINTS='[{"name": "kimi-prod", "kind": "eks", "route": {"gateway": {"name": "gw"}}}]')
    (tmp_path / "data").mkdir()
    schema.upgrade(f"sqlite:///{tmp_path / 'data' / 'kimi-ops.db'}")
    done = subprocess.run([sys.executable, "-c", LAZY_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.split("\n")[:2]
    assert before == "-"
    assert "boto3" in after.split() and "kubernetes" not in after.split()
