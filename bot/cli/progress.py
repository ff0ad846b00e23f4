"""Driving a deployment from a terminal: progress lines while the engine works, and how long to wait at most.

``deploy``, ``rollback``, ``gate approve`` and ``drain`` run the engine in this process until the deployment
waits for a person or ends; on a real cluster a step can take twenty minutes (a cold start). :func:`drive` runs
that work on a thread and prints each state change and step line as it is recorded (``12:01:03  → applying``).
With ``--timeout`` it stops waiting after that many seconds and says where the deployment is: this process then
exits, the deployment's lease lapses, and a running ``kimi-ops serve`` (or ``kimi-ops resume``) carries it on
from its stored state, as after any stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from bot.cli import output
from bot.cli.conventions import EXIT_REFUSED

if TYPE_CHECKING:
    from bot.domain.read_models import DeploymentView
    from bot.services.context import Context

POLL_SECONDS = 0.5
TIMEOUT_OPTION = typer.Option(None, "--timeout", metavar="SECONDS", min=1,
                              help="Stop waiting after SECONDS (the deployment carries on in the bot); default: "
                                   "wait until it waits for a person or ends.")


def drive(ctx: Context, deployment_id: int, work: Callable[[], DeploymentView], timeout: float | None) -> DeploymentView:
    """Run ``work`` (the engine on ``deployment_id``), printing its progress lines; at most ``timeout`` seconds."""
    from bot.services.progress import last_event, progress_since

    seen = last_event(ctx, deployment_id)
    views: list[DeploymentView] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            views.append(work())
        except BaseException as exc:  # handed to the waiting thread, which reports it like any failure
            errors.append(exc)

    worker = threading.Thread(target=run, name=f"kimi-drive-{deployment_id}", daemon=True)
    worker.start()
    started = time.monotonic()
    while True:
        worker.join(POLL_SECONDS)
        for line in progress_since(ctx, deployment_id, seen):
            output.info(f"  {line.at:%H:%M:%S}  {line.text}")
            seen = line.event_id
        if not worker.is_alive():
            break
        if timeout is not None and time.monotonic() - started > timeout:
            from bot.services.deployments import get_deployment

            now = get_deployment(ctx, deployment_id)
            output.error(f"deployment #{deployment_id} is still in its `{now.state.words}` step after "
                         f"{timeout:g} s; stopped waiting. It carries on in a running `kimi-ops serve` once this "
                         f"process's hold lapses (or `kimi-ops resume`); `kimi-ops gate show {deployment_id}` shows it.")
            raise typer.Exit(EXIT_REFUSED)
    if errors:
        raise errors[0]
    return views[0]
