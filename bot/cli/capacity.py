"""``kimi-ops capacity ENDPOINT``: the last capacity review, production's live mix and the drift; a sweep on demand.

``-o table|json|yaml`` as every read command; ``--trace FILE`` registers a redacted trace (docs/capacity.md) as
the endpoint's production mix; ``--sweep`` runs a capacity review now against the idle side of a pair or an
endpoint closed to users (never on users), and prints its report.
"""

from __future__ import annotations

from pathlib import Path

import typer

from bot.cli import output
from bot.cli.conventions import EXIT_REFUSED, OUTPUT_OPTION, Format
from bot.cli.options import AS_OPTION


def capacity(
    endpoint: str = typer.Argument(..., metavar="ENDPOINT", help="The endpoint to show (or sweep)."),
    sweep: bool = typer.Option(False, "--sweep", help="Run a capacity review now (idle side of a pair, or closed admission)."),
    trace: Path = typer.Option(None, "--trace", metavar="FILE", help="Register a redacted JSONL trace as production's mix."),
    user: str = AS_OPTION,
    fmt: Format = OUTPUT_OPTION,
) -> None:
    """Show the last capacity review, the live request mix and its drift; register a trace or sweep on demand."""
    from bot.cli.common import context, identity
    from bot.cli.guard import run_guarded
    from bot.services.capacity import capacity_sweep, capacity_view
    from bot.services.errors import Invalid
    from bot.services.traffic_mix import register_trace
    from bot.views.capacity import capacity_lines
    from bot.views.gate_text import render_traffic_report

    def body() -> None:
        ctx = context()
        if trace is not None:
            try:
                raw = trace.read_bytes()
            except OSError as exc:
                raise Invalid(f"cannot read the trace {trace}: {exc.strerror or exc}") from None
            mix = register_trace(ctx, endpoint, raw, identity(ctx, user))
            output.info(f"trace registered for {endpoint} (sha256 {mix.trace_sha256}): {mix.words()}")
        if sweep:
            report = capacity_sweep(ctx, endpoint, identity(ctx, user))
            output.info(render_traffic_report(report))
            if report.status in ("fail", "error"):
                raise typer.Exit(EXIT_REFUSED)
        view = capacity_view(ctx, endpoint).as_dict()

        def lines() -> None:
            for line in capacity_lines(view):
                output.info(line)

        output.emit(fmt, view, lines)

    run_guarded(body)


def register(root: typer.Typer) -> None:
    root.command("capacity")(capacity)
