"""The model gate's two modules share one world: the stand-in answering the test set, and a context that evaluates it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.sandbox.openai_server import OpenAIServer
from tests.model_gate_support import evaluating_ctx, healthy_server


@pytest.fixture()
def server() -> Iterator[OpenAIServer]:
    yield from healthy_server()


@pytest.fixture()
def gate_ctx(make_ctx: Any, tmp_path: Path) -> Any:
    return evaluating_ctx(make_ctx, tmp_path)
