"""Layering and documentation rules that keep the code base honest."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from bot.config import Settings

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_configuration_reference_documents_every_setting() -> None:
    reference = (REPO / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", reference, flags=re.M))
    expected = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        expected.add(alias.choices[0] if alias is not None else f"KIMI_{name.upper()}")
    assert expected - documented == set(), "docs/configuration.md misses these settings (./dev docs)"


def test_the_recorded_test_order_names_only_test_modules_that_exist() -> None:
    """``tests/durations.json`` orders the run (longest first); a moved or deleted module would leave its time behind."""
    recorded = json.loads((REPO / "tests" / "durations.json").read_text())
    missing = [module for module in recorded if not (REPO / module).is_file()]
    assert not missing, f"tests/durations.json names modules that no longer exist: {missing} (bench/suite_cpu.py)"
