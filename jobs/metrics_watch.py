"""Scheduled entrypoint: the metrics watch of every live endpoint (default every minute).

APScheduler calls :func:`run` by its textual reference; the Context is the one of
the root in :mod:`bot.runtime`, and the outcome is recorded by the scheduling service.
"""

from __future__ import annotations

from bot import runtime
from bot.services.scheduling import run_job

NAME = "metrics-watch"


def run() -> None:
    run_job(runtime.current().ctx, NAME)
