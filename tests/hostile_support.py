"""The example release's data with changes, and a secret as a red-team pass writes it, shared by the hostile-input
tables (``tests/cli/test_hostile_*.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml

from tests.conftest import EXAMPLE_RELEASE

BASE: dict[str, Any] = yaml.safe_load(EXAMPLE_RELEASE.read_text())
SK = "sk-live-7f3a9b2c4d5e6f708192a3b4c5d6e7f8"


def edited(**changes: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The example release's data with each change applied (see ``env`` and the changes in the tables)."""
    data = copy.deepcopy(BASE)
    for change in changes.values():
        change(data)
    return data


def env(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["serving"].setdefault("env", {}).update(values)
