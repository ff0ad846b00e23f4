"""Fixtures of the whole-stack modules that share three ``kimi-ops serve`` replicas (``tests/stack/replica_pool.py``).

Module-scoped: each module that asks for ``replicas`` starts its own sandbox and replicas once per database, so
modules of different ideas (a kill, a cancel) run side by side on different workers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.stack.replica_pool import Pool, hand_over, serve_pool


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def replicas(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    yield from serve_pool(request, tmp_path_factory)


@pytest.fixture()
def handed(replicas: Pool) -> Iterator[int]:
    yield from hand_over(replicas)
