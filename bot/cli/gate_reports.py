"""``kimi-ops gate report`` and ``gate accept-limits``: a gate's stored report read back, and what it proposed.

``gate report`` prints the newest report of a gate (the model and traffic gates as their tables) and, with
``--plot FILE``, draws that report's plot from its stored numbers (the picture the Slack thread shows). ``gate
accept-limits`` takes a traffic gate's proposed request limits for the endpoint, bound to the report read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from bot.cli import output
from bot.cli.common import context, identity, root
from bot.cli.conventions import OUTPUT_OPTION, Format
from bot.cli.guard import run_guarded
from bot.cli.options import AS_OPTION, DEPLOYMENT_ARGUMENT, GATE_ARGUMENT, gate_named
from bot.cli.progress import TIMEOUT_OPTION, drive

if TYPE_CHECKING:
    from bot.services.gate_reports import StoredGateReport


def gate_report(
    deployment: int = DEPLOYMENT_ARGUMENT,
    gate: str = GATE_ARGUMENT,
    fmt: Format = OUTPUT_OPTION,
    plot: Path | None = typer.Option(None, "--plot", metavar="FILE", dir_okay=False,
                                     help="Also draw the model or traffic report's plot, as a PNG, into FILE."),
) -> None:
    """Print the stored report of GATE of DEPLOYMENT (the newest one, decided or waiting)."""
    from bot.services.errors import Invalid, Refused
    from bot.services.gate_reports import gate_plot, stored_gate_report

    def body() -> None:
        named = gate_named(gate)
        if plot is not None and named not in ("model", "traffic"):
            raise Invalid(f"the {named} gate has no plot; the model and traffic gates do")
        stored = stored_gate_report(context(), deployment, named)
        output.emit(fmt, stored, lambda: print_report(stored))
        if plot is None:
            return
        data = gate_plot(stored)
        if data is None:
            raise Refused(f"the {named} report of deployment #{deployment} holds no numbers to draw (its checks did "
                          "not measure)")
        try:
            plot.write_bytes(data)
        except OSError as exc:
            raise Refused(f"the plot cannot be written to {plot}: {exc.strerror or exc}") from None
        if fmt is Format.TABLE:  # a script reading -o json gets the document alone
            output.info(f"plot written to {plot}")

    run_guarded(body)


def print_report(stored: StoredGateReport) -> None:
    from bot.cli.render import report_lines
    from bot.views.gate_text import render_model_report, render_traffic_report

    gate = stored.gate
    if stored.decision:
        verdict = f"{stored.decision} by {stored.decided_by} at {stored.decided_at:%Y-%m-%d %H:%M} UTC" + (
            f" — {stored.decision_reason}" if stored.decision_reason else "")
    else:
        verdict = "waiting for a decision"
    rechecks = f" (check run {stored.checks_run})" if stored.checks_run > 1 else ""
    output.info(f"deployment #{stored.deployment_id} ({stored.kind} of {stored.release}), {gate} gate: {verdict}")
    output.info(f"checked {stored.checked_at:%Y-%m-%d %H:%M} UTC{rechecks}, report {stored.report_hash[:12]}")
    output.info("")
    # The model and traffic gates carry tables (evaluation, sweep); the others are their check list.
    if gate == "model":
        output.info(render_model_report(stored.report))
    elif gate == "traffic":
        output.info(render_traffic_report(stored.report))
    else:
        for line in report_lines(stored.report):
            output.info(line)


def gate_accept_limits(
    deployment: int = typer.Argument(..., metavar="DEPLOYMENT", help="Deployment number whose traffic gate proposed the limits."),
    report: str = typer.Option(None, "--report", metavar="HASH",
                               help="Hash (or its first characters) of the traffic report you read, "
                                                      "as `gate report` prints it; refused if the report changed since."),
    user: str = AS_OPTION,
    timeout: float = TIMEOUT_OPTION,
) -> None:
    """Accept the request limits DEPLOYMENT's traffic gate proposed for its endpoint (approvers); drives the restore or
    ramp that applies them, printing its progress, as `rollback` does."""
    from bot.cli.render import deployment_lines
    from bot.services.errors import Refused
    from bot.services.gate_reports import stored_gate_report
    from bot.services.traffic_gate import accept_proposed_limits

    def body() -> None:
        here = root()
        ctx = here.ctx
        who = identity(ctx, user)
        stored = stored_gate_report(ctx, deployment, "traffic")
        if report is not None and not stored.report_hash.startswith(report.strip().lower()):
            raise Refused(f"the traffic report of deployment #{deployment} is now {stored.report_hash[:12]}, not {report} "
                          f"(it was re-checked); read it with `kimi-ops gate report {deployment} traffic` and accept again")
        # Bound to the report just read: a recheck landing in between is refused by the service, not applied.
        accepted = accept_proposed_limits(ctx, None, deployment, who, seen_report_hash=stored.report_hash)
        now, was = accepted.accepted, accepted.previous
        output.info(
            f"{accepted.endpoint}: request limits set to {now['max_concurrent_requests']} concurrent, "
            f"queue {now['max_queue_size']} "
            f"(were {was['max_concurrent_requests']}, queue {was['max_queue_size']}), accepted by {who} "
            f"from report {stored.report_hash[:12]} of deployment #{deployment}'s traffic gate"
        )
        if accepted.applied_sha256:
            output.info(f"  applied to deployment #{deployment}'s running release: manifest revision {accepted.revision} "
                        f"({accepted.applied_sha256[:12]}); a rollback to this release restores them")
        elif accepted.restore_id is not None:
            output.info(f"  restore #{accepted.restore_id} applies them to the live release: {accepted.how}")
        elif accepted.ramping:
            output.info(f"  deployment #{deployment} is ramping, so its ramp applies them: {accepted.how}")
        else:
            output.info(f"  {accepted.how or 'the next manifest rendered for it uses them'} (a rollback re-applies its "
                        "stored manifest unchanged)")
        driven = accepted.drive
        if driven is not None:
            for line in deployment_lines(drive(ctx, driven, lambda: here.engine.advance(driven), timeout)):
                output.info(line)

    run_guarded(body)


def register_reports(gate_app: typer.Typer) -> None:
    gate_app.command("report")(gate_report)
    gate_app.command("accept-limits")(gate_accept_limits)
