"""Scheduled entrypoint: readiness probes of every live endpoint (default every 5 minutes).

APScheduler calls :func:`run` by its textual reference; the Context is the one of
the root in :mod:`bot.runtime`, and the outcome is recorded by the scheduling service.
"""

from __future__ import annotations

from bot import runtime
from bot.services.scheduling import run_job

NAME = "readiness-probe"


def run() -> None:
    run_job(runtime.current().ctx, NAME)
