"""The README and the docs say what ships: their commands exist, their endpoint is the sandbox's, their diff is the
shipped releases'.

The read-only terminal examples also run against the sandbox in ``tests/stack/test_cli_end_to_end.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer.main
import yaml
from typer.testing import CliRunner

from bot.cli.main import app
from bot.domain.release import ReleaseManifest
from bot.domain.release_diff import diff_releases, render_diff
from bot.sandbox.stack import ENDPOINT
from tests.docs_support import DOCS, README, command_lines, text_block_after

ROOT = Path(__file__).resolve().parents[2]


def _resolve(words: list[str]) -> tuple[list[str], int]:
    """The sub-command path ``words`` start with, as the CLI resolves it (a group, then its command), and how many
    of the words name it (a group's default command, ``slo`` → ``slo show``, is named by none)."""
    group = typer.main.get_command(app)
    path: list[str] = []
    named = 0
    while commands := getattr(group, "commands", None):
        word = words[named] if named < len(words) else None
        default = getattr(group, "default_command", None)
        if word not in commands and default is not None:
            word = default
        else:
            assert word in commands, f"`kimi-ops {' '.join([*path, str(word)])}` in the docs is no kimi-ops command"
            named += 1
        path.append(str(word))
        group = commands[str(word)]
    return path, named


def _command_path(words: list[str]) -> list[str]:
    return _resolve(words)[0]


def test_every_command_the_docs_show_exists_and_answers_help() -> None:
    lines = command_lines()
    assert len(lines) > 30
    runner = CliRunner()
    for path in {tuple(_command_path(words)) for words in lines}:
        assert runner.invoke(app, [*path, "--help"]).exit_code == 0, path


def test_the_docs_terminal_workflow_names_the_sandbox_endpoint() -> None:
    for words in command_lines():
        for flag in ("--to", "history", "rollback", "open", "close"):
            if flag in words and words.index(flag) + 1 < len(words) and words[0] != "release":
                named = words[words.index(flag) + 1]
                if not named.startswith(("-", "kimi-k3-20", "RELEASE", "ENDPOINT")):
                    assert named == ENDPOINT, words


def test_every_positional_endpoint_the_docs_fill_in_is_the_sandbox_endpoint() -> None:
    root = typer.main.get_command(app)
    named = 0
    for words in command_lines():
        command: Any = root
        path, named_by = _resolve(words)
        for word in path:
            command = command.commands[word]
        # The command line as the CLI parses it (no callbacks run): which argument each word is.
        params = command.make_context("kimi-ops", words[named_by:], resilient_parsing=True).params
        for param in command.params:
            value = params.get(param.name)
            if param.param_type_name == "argument" and str(param.metavar or param.name).upper() == "ENDPOINT" \
                    and isinstance(value, str) and not value.isupper() and value != "x":
                assert value == ENDPOINT, words
                named += 1
    assert named >= 3  # drill, drills, licence review at least


def test_the_releases_page_diff_is_what_the_shipped_releases_give() -> None:
    old, new = (ReleaseManifest.model_validate(yaml.safe_load((ROOT / f"deploy/releases/{name}.yaml").read_text()))
                for name in ("kimi-k3-2026-08-01", "kimi-k3-2026-09-01"))
    assert "$ kimi-ops release diff kimi-k3-2026-08-01 kimi-k3-2026-09-01" in (DOCS / "releases.md").read_text()
    shown = text_block_after("kimi-ops release diff kimi-k3-2026-08-01 kimi-k3-2026-09-01")
    assert shown.strip() == render_diff(diff_releases(old, new)).strip()


def test_the_readme_says_where_plots_and_stand_ins_are() -> None:
    text = README.read_text()
    assert "kimi-ops sandbox --addresses" in text and "KIMI_DATA_DIR/reports/" in text


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for command in ("./dev demo", "./dev test", "./dev run kimi-ops sandbox"):
        assert command in text, command
    for page in DOCS.glob("*.md"):
        assert f"(docs/{page.name})" in text, f"the README does not link docs/{page.name}"


def test_the_releases_page_lists_the_infrastructure_gates_checks() -> None:
    text = (DOCS / "releases.md").read_text()
    table = text[text.index("The infrastructure gate (`gate recheck"):]
    table = table[:table.index("\n\n", table.index("| check |"))]
    named = {name for row in table.splitlines() if row.startswith("| `") for name in row.split(" | ")[0][2:].split("`, `")}
    named = {name.strip("`") for name in named}
    # What bot/services/gates.py infrastructure_report and the cluster preflight it runs can name.
    assert named >= {"cluster.access", "cluster.crd", "cluster.operator", "cluster.namespace", "cluster.gpu_nodes",
                     "reservation", "reservation.instance_type", "reservation.target", "reservation.zone",
                     "reservation.window", "pods.boundary", "capture.policy", "drills.recent"}, named


def test_files_the_docs_write_stay_out_of_the_repository() -> None:
    # `kimi-ops sandbox --headless > FILE` holds the stand-in signing secret: under .kimi-ops/ (ignored) or ignored.
    import re

    ignored = {line.strip().rstrip("/") for line in (ROOT / ".gitignore").read_text().splitlines() if line.strip()}
    for page in (README, *sorted(DOCS.glob("*.md"))):
        for target in re.findall(r"kimi-ops [^\n`]*? > ([\w./-]+)", page.read_text()):
            if target.startswith("/"):
                continue
            assert target.split("/")[0] in ignored or target in ignored, f"{page.name} writes {target} into the repository"
