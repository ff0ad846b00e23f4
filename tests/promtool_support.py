"""The real Prometheus tools for tests: ``promtool``, ``prometheus`` and ``alertmanager`` from the PATH.

``.ci/run`` installs them (Debian's ``prometheus`` and ``prometheus-alertmanager``; the latter's binary is
``prometheus-alertmanager``). Elsewhere a test that needs one is skipped with how to get it; under CI
(``CI`` set) a missing tool fails the test instead, so CI never passes without running them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

NAMES = {"promtool": ("promtool",), "prometheus": ("prometheus",),
         "alertmanager": ("alertmanager", "prometheus-alertmanager")}
HOW = ("install them: `apt-get install prometheus prometheus-alertmanager` (Debian/Ubuntu), `brew install prometheus "
       "alertmanager`, or the release archives at https://prometheus.io/download/ (docs/alerting.md)")


def tool(name: str) -> str:
    """The path of ``name``; skipped outside CI, failed under CI, when it is not installed."""
    for candidate in NAMES[name]:
        if found := shutil.which(candidate):
            return found
    if os.environ.get("CI"):
        pytest.fail(f"{name} is not on the PATH under CI; .ci/run installs it")
    pytest.skip(f"{name} is not on the PATH; {HOW}")


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, cwd=cwd, timeout=300, check=False)


def check_rules(path: Path) -> None:
    """``promtool check rules`` must pass on ``path``."""
    done = promtool("check", "rules", str(path))
    assert done.returncode == 0, f"promtool check rules {path.name}:\n{done.stdout}\n{done.stderr}"


def write_yaml(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False, width=1_000_000), encoding="utf-8")
    return path
