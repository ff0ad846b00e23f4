"""The bot's container image (``deploy/bot/Dockerfile``): pinned base, non-root, what it installs and carries.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import typer
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bot.cli.main import app as cli_app
from tests.deploy_support import BOT, REPO, one_object


def _dockerfile() -> str:
    return (BOT / "Dockerfile").read_text()


def test_dockerfile_pins_its_base_by_version_and_digest_and_runs_non_root() -> None:
    text = _dockerfile()
    pinned = re.findall(r"^ARG PYTHON_IMAGE=(python:3\.11\.\d+-slim-\w+@sha256:[0-9a-f]{64})$", text, re.M)
    assert len(pinned) == 1
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert froms and all(f == "${PYTHON_IMAGE}" for f in froms), froms
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] == "10001"
    assert re.search(r"^ENTRYPOINT \[\"kimi-ops\"\]$", text, re.M)
    # serve binds 127.0.0.1 by default; in a container the probes and Prometheus come from outside it.
    assert re.search(r'^CMD \["serve", "--socket", "--host", "0.0.0.0"\]$', text, re.M)
    assert not re.search(r"^HEALTHCHECK", text, re.M)
    assert not re.search(r"^ADD\s", text, re.M), "ADD can fetch URLs and unpack archives; COPY is enough"
    deployment = one_object("Deployment", "kimi-ops")["spec"]["template"]["spec"]
    assert deployment["securityContext"]["runAsUser"] == int(users[-1].split(":")[0])


def _dockerignore_admits(path: str) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    admitted = True
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(part, pattern[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes)
        if hit:
            admitted = negate
    return admitted


def test_image_contains_every_package_and_the_build_context_keeps_local_state_out() -> None:
    copy_lines = re.findall(r"^COPY (?!--from)(.+)$", _dockerfile(), re.M)
    copied = {source for line in copy_lines for source in line.split()[:-1]}
    assert copied == {"bot", "commands", "jobs", "migrations", "pyproject.toml", "README.md", "deploy/evaluation",
                      ".ci/constraints.txt"}
    for source in copied:
        assert _dockerignore_admits(source), f".dockerignore excludes {source}, which the Dockerfile copies"
    for private in (".venv/bin/python", ".kimi-ops/kimi-ops.db", ".git/config", "tests/conftest.py", ".env",
                    "bot/__pycache__/x.pyc"):
        assert not _dockerignore_admits(private), f"{private} would be sent to the image build"


def test_the_image_carries_the_model_gate_evaluation_set_where_its_setting_points() -> None:
    # Without it the model gate of an in-cluster bot would fail to load its cases on every deploy.
    text = _dockerfile()
    copied = re.search(r"^COPY deploy/evaluation (\S+)$", text, re.M)
    configured = re.search(r"KIMI_EVALUATION_SET=(\S+)", text)
    assert copied and configured
    image_path = Path(configured.group(1))
    assert image_path.parent == Path(copied.group(1))
    assert (REPO / "deploy" / "evaluation" / image_path.name).is_file()


def _runtime_closure(*extras: str) -> set[str]:
    """Distributions the image installs: the runtime dependencies (with their extras) and theirs, transitively.

    With ``extras``, also those of kimi-ops' own optional-dependency groups of those names.
    """
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    raw_requirements = list(project["dependencies"])
    for extra in extras:
        raw_requirements += project["optional-dependencies"][extra]
    pending = [Requirement(r) for r in raw_requirements]
    seen: set[str] = set()
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        for raw in metadata.requires(requirement.name) or []:
            child = Requirement(raw)
            extras = requirement.extras or {""}
            if child.marker is None or any(child.marker.evaluate({"extra": extra}) for extra in extras):
                pending.append(child)
    return seen


def _third_party_imports(paths: list[Path]) -> dict[str, str]:
    """Top-level third-party modules the files import (anywhere, lazily too), each with one file importing it."""
    found: dict[str, str] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("bot", "commands", "jobs", "migrations"):
                    found.setdefault(top, str(path.relative_to(REPO)))
    return found


def _not_provided(imports: dict[str, str], installed: set[str]) -> dict[str, str]:
    providers = metadata.packages_distributions()
    return {top: where for top, where in imports.items()
            if not {canonicalize_name(d) for d in providers.get(top, [])} & installed}


def test_the_image_leaves_the_sandbox_extra_out_and_says_so() -> None:
    # The image installs the bare wheel; `kimi-ops demo` there answers with the install hint (tested in
    # test_sandbox_demo), so the Dockerfile must not half-install the stand-ins either.
    text = _dockerfile()
    installs = re.findall(r"pip install --constraint constraints.txt (\S+)", text)
    assert installs == ["/wheels/kimi_ops-*.whl"], installs
    instructions = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"sandbox|moto|kmock|aiohttp|deploy/releases", instructions)
    assert "WITHOUT the `sandbox` extra" in text and "kimi-ops demo" in text
    assert not _dockerignore_admits("deploy/releases/kimi-k3-2026-08-01.yaml")
    assert not {"moto", "kmock"} & _runtime_closure()  # (aiohttp comes with the Kubernetes client anyway)


def test_the_image_installs_the_versions_ci_pinned() -> None:
    # The image resolves nothing afresh: every distribution it installs is pinned in .ci/constraints.txt, the
    # file CI installs from, and the build copies that very file (the .dockerignore admits it).
    text = _dockerfile()
    assert re.search(r"^COPY \.ci/constraints\.txt \./constraints\.txt$", text, re.M)
    assert re.findall(r"pip install (\S+)", text) == ["--constraint"]
    pinned = {canonicalize_name(line.split("==")[0]) for line in (REPO / ".ci" / "constraints.txt").read_text().splitlines()
              if "==" in line and not line.lstrip().startswith("#")}
    assert _runtime_closure() - pinned == set(), "installed by the image but not pinned in .ci/constraints.txt"


def test_the_sandbox_extra_provides_every_library_the_stand_ins_import() -> None:
    sandbox = sorted((REPO / "bot" / "sandbox").rglob("*.py"))
    imports = _third_party_imports(sandbox)
    assert {"moto", "kmock", "aiohttp"} <= set(imports), imports
    assert _not_provided(imports, _runtime_closure("sandbox")) == {}, "imported by bot/sandbox but not in the sandbox extra"


def test_every_library_the_bot_imports_is_installed_in_the_image() -> None:
    """The image installs runtime dependencies only; a module imported from a dev-only package breaks it there.

    ``bot/sandbox`` (the embedded stand-ins for the demo) is the one part built on the optional `sandbox` extra.
    """
    paths = [path for package in ("bot", "commands", "jobs", "migrations") for path in (REPO / package).rglob("*.py")
             if path.relative_to(REPO).parts[:2] != ("bot", "sandbox")]
    missing = _not_provided(_third_party_imports(paths), _runtime_closure())
    assert missing == {}, "imported but not a runtime dependency (add it to [project].dependencies)"


def _parse_cli(args: list[str]) -> dict[str, Any]:
    """Parse ``kimi-ops ARGS`` as the entry point would (sub-commands resolved, options checked), without running.

    The container commands put no group-level options before a sub-command, so each group consumes one name.
    """
    command: Any = typer.main.get_command(cli_app)
    ctx = command.make_context("kimi-ops", list(args))
    rest = list(args)
    while hasattr(command, "list_commands"):
        name, *rest = rest
        command = command.get_command(ctx, name)
        assert command is not None, f"kimi-ops has no command {name}"
        ctx = command.make_context(name, list(rest), parent=ctx)
    return dict(ctx.params)


def test_container_commands_are_commands_the_cli_accepts() -> None:
    """The image's CMD, the Deployment's args and the migration Job's args parse with the real CLI."""
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", _dockerfile(), re.M).group(1))  # type: ignore[union-attr]
    assert _parse_cli(cmd)["socket"] is True
    (container,) = one_object("Deployment", "kimi-ops")["spec"]["template"]["spec"]["containers"]
    params = _parse_cli(container["args"])
    assert params["socket"] is True and params["jobs"] is True and params["port"] == container["ports"][0]["containerPort"]
    (job,) = one_object("Job", "kimi-ops-db-upgrade")["spec"]["template"]["spec"]["containers"]
    assert _parse_cli(job["args"]) == {"revision": "head"}
    with pytest.raises(Exception, match="No such option"):
        _parse_cli(["serve", "--sockets"])
