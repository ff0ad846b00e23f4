"""``--watch``: follow a deployment that another process drives (``serve``, a colleague's terminal).

``kimi-ops status ENDPOINT --watch`` follows the deployment in flight on ENDPOINT; ``kimi-ops gate show DEPLOYMENT
--watch`` follows that one. Nothing is driven here: every half second the state changes and step lines the
engine recorded (the lines the Slack thread shows) are read from the database and printed as they appear
(``12:01:03  → applying``). At a gate, or a drain past its deadline, it says once what waits and how to decide
it, then keeps following. It exits 0 once the deployment is live, 1 when it ended without going live (the
CLI's exit codes), and 1 after ``--timeout`` seconds, saying where the deployment is; the deployment carries on.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer

from bot.cli import output
from bot.cli.conventions import EXIT_REFUSED, Format
from bot.domain.chat_text import unmarked

if TYPE_CHECKING:
    from bot.domain.read_models import DeploymentView
    from bot.services.context import Context

POLL_SECONDS = 0.5
WATCH_OPTION = typer.Option(False, "--watch", "-w",
                            help="Follow the deployment in flight as it is recorded, until it is live (exit 0) or ends "
                                 "(exit 1); at a gate, say how to decide it and keep following.")


WATCH_TIMEOUT_OPTION = typer.Option(None, "--timeout", metavar="SECONDS", min=1,
                                    help="With --watch: stop watching after SECONDS (the deployment carries on).")


def watching(watch: bool, fmt: Format, timeout: float | None) -> bool:
    """Whether to watch; ``-o json|yaml`` (one document read once) and ``--timeout`` without ``--watch`` are refused."""
    from bot.services.errors import Invalid

    if not watch:
        if timeout is not None:
            raise Invalid("--timeout bounds --watch: add --watch, or drop --timeout")
        return False
    if fmt is not Format.TABLE:
        raise Invalid(f"--watch prints lines as they are recorded and -o {fmt.value} reads once: use one or the other")
    return True


def watch_endpoint(ctx: Context, endpoint: str | None, timeout: float | None) -> None:
    """Follow the deployment in flight on ``endpoint``; with none in flight, say so and return (exit 0)."""
    from bot.services.progress import in_flight_on

    name, view = in_flight_on(ctx, endpoint)
    if view is None:
        output.info(f"no deployment in flight on {name}; `kimi-ops history {name}` lists the last ones")
        return
    follow(ctx, view.id, timeout)


def follow(ctx: Context, deployment_id: int, timeout: float | None) -> None:
    """Print ``deployment_id``'s recorded lines as they appear until it goes live or ends, or ``timeout`` passes."""
    from bot.services.deployments import get_deployment
    from bot.services.progress import last_event, progress_since

    view = get_deployment(ctx, deployment_id)
    seen = last_event(ctx, deployment_id)
    output.info(f"deployment #{view.id}: {view.kind} of {view.release} on {view.endpoint}, requested by "
                f"{view.requested_by}; now {view.state.words}" + ("" if view.state.terminal else " (following it)"))
    told: tuple[str, str | None] | None = None
    started = time.monotonic()
    while True:
        # The view first, then the lines: a state is committed with its line, so the last line is never missed.
        view = get_deployment(ctx, deployment_id)
        for line in progress_since(ctx, deployment_id, seen):
            output.info(f"  {line.at:%H:%M:%S}  {line.text}")
            seen = line.event_id
        if view.state.terminal:
            _ended(view)
            return
        waiting = (view.state.value, view.pending.report_hash if view.pending else None)
        words = waits_for(view)
        if words is not None and waiting != told:
            output.info(f"  waiting: {words}")
            told = waiting
        if timeout is not None and time.monotonic() - started > timeout:
            output.error(f"deployment #{deployment_id} is still in its `{view.state.words}` step after {timeout:g} s; "
                         "stopped watching (the deployment carries on)")
            raise typer.Exit(EXIT_REFUSED)
        time.sleep(POLL_SECONDS)


def waits_for(view: DeploymentView) -> str | None:
    """What the deployment waits for a person to decide, and how, in one sentence; None while kimi-ops works."""
    from bot.domain.states import State

    n = view.id
    pending = view.pending
    if pending is not None and pending.approvable:
        return (f"the {pending.gate} gate waits for an approver: the buttons in its Slack thread, or "
                f"`kimi-ops gate approve {n} {pending.gate} --as <approver>` (`kimi-ops gate reject {n} {pending.gate} "
                f"--reason …` to stop it); its report: `kimi-ops gate report {n} {pending.gate}`")
    if pending is not None:
        return (f"the {pending.gate} gate is blocked by a failed check: `kimi-ops gate recheck {n} {pending.gate}` runs it "
                f"again, or `kimi-ops gate reject {n} {pending.gate} --reason …`; its report: "
                f"`kimi-ops gate report {n} {pending.gate}`")
    if view.state is State.DRAIN_STALLED:
        return (f"the drain passed its deadline: `kimi-ops drain wait {n}` waits longer, `kimi-ops drain abort {n}` "
                "gives users the running release back")
    return None


def _ended(view: DeploymentView) -> None:
    """The last line: live (exit 0), or how it ended (exit 1)."""
    from bot.domain.states import WAS_LIVE, State

    if view.state in WAS_LIVE:
        later = "" if view.state is State.LIVE else " (since superseded)"
        output.info(f"deployment #{view.id} is live: {view.release} on {view.endpoint}{later}")
        return
    why = f": {unmarked(view.state_reason)}" if view.state_reason else ""
    output.error(f"deployment #{view.id} ended {view.state.words}{why}")
    raise typer.Exit(EXIT_REFUSED)
