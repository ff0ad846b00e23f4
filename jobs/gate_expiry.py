"""Scheduled entrypoint: gate expiry (default every minute).

APScheduler calls :func:`run` by its textual reference; the Context and the
engine are the root's in :mod:`bot.runtime`. The engine drives, within this
run, the restores and reopenings an expiry starts; the outcome is recorded by
the scheduling service.
"""

from __future__ import annotations

from bot import runtime
from bot.services.scheduling import run_job

NAME = "gate-expiry"


def run() -> None:
    root = runtime.current()
    run_job(root.ctx, NAME, engine=root.engine)
