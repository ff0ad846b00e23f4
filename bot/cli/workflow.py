"""``kimi-ops deploy / gate / rollback / cancel / history / resume``: the gated workflow from a terminal.

``gate report`` and ``gate accept-limits`` are in :mod:`bot.cli.gate_reports`.

Each command acts as a Slack identity (``--as U…`` or ``KIMI_CLI_USER``) so the
same roles and separation of duties apply as in Slack. Slow steps run in this
process after the request is recorded, until the deployment waits for a person.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from bot.cli import output
from bot.cli.common import context, identity, root
from bot.cli.conventions import EXIT_REFUSED, OUTPUT_OPTION, Format, typer_app
from bot.cli.gate_reports import register_reports
from bot.cli.guard import run_guarded
from bot.cli.options import AS_OPTION, DEPLOYMENT_ARGUMENT, GATE_ARGUMENT, gate_named
from bot.cli.progress import TIMEOUT_OPTION, drive
from bot.cli.watch import WATCH_OPTION, WATCH_TIMEOUT_OPTION, follow, watching

if TYPE_CHECKING:
    from bot.domain.read_models import DeploymentView

gate_app = typer_app(help="Decide or re-run a deployment's gates.")

VERBOSE_OPTION = typer.Option(False, "--verbose", "-v", help="After a refusal, also print the gate's report.")


def _show(view: DeploymentView) -> None:
    from bot.cli.render import deployment_lines

    for line in deployment_lines(view):
        output.info(line)


def _outcome(view: DeploymentView) -> None:
    """Exit 1 when what was asked for cannot go on: the deployment ended without going live, or its gate is blocked."""
    from bot.domain.states import State

    if view.state.terminal and view.state is not State.LIVE:
        raise typer.Exit(EXIT_REFUSED)
    if view.pending is not None and not view.pending.approvable:
        raise typer.Exit(EXIT_REFUSED)


def deploy(
    release: str = typer.Argument(..., metavar="RELEASE", help="Release name."),
    to: str = typer.Option(None, "--to", metavar="ENDPOINT", help="Endpoint (optional when only one is configured)."),
    user: str = AS_OPTION,
    timeout: float = TIMEOUT_OPTION,
) -> None:
    """Request a deployment of RELEASE and run it up to its first gate, printing its progress."""
    from bot.services.deployments import request_deploy

    def body() -> None:
        here = root()
        asked = request_deploy(here.ctx, release, to, identity(here.ctx, user)).id
        view = drive(here.ctx, asked, lambda: here.engine.advance(asked), timeout)
        _show(view)
        _outcome(view)

    run_guarded(body)


def rollback(
    endpoint: str | None = typer.Argument(None, metavar="ENDPOINT|SERVICE",
                                          help="Endpoint (optional when only one is configured), or a service (a pair)."),
    to: str | None = typer.Option(None, "--to", metavar="RELEASE",
                                  help="Release to restore (default: the one live before the current)."),
    user: str = AS_OPTION,
    timeout: float = TIMEOUT_OPTION,
) -> None:
    """Roll back to the complete previous release tuple and its exact manifest, printing its progress; a service
    moves its users back to the side kept warm in one route change."""
    from bot.services.deployments import request_rollback
    from bot.services.pair_sides import service_settings
    from bot.services.pairs import rollback_service
    from bot.views.ramp import service_rolled_back

    def body() -> None:
        here = root()
        service = service_settings(here.ctx, endpoint)
        if to is None and service is not None:
            done = rollback_service(here.ctx, service.name, identity(here.ctx, user))
            output.info(service_rolled_back(done, bold=False))
            return
        asked = request_rollback(here.ctx, endpoint, identity(here.ctx, user), to).id
        view = drive(here.ctx, asked, lambda: here.engine.advance(asked), timeout)
        _show(view)
        _outcome(view)

    run_guarded(body)


def cancel(
    deployment: int = DEPLOYMENT_ARGUMENT,
    force: bool = typer.Option(False, "--force", help="Admins: break a stuck deployment's hold on its endpoint."),
    user: str = AS_OPTION,
) -> None:
    """Cancel an in-flight deployment, releasing its endpoint."""
    from bot.services.deployments import cancel as cancel_deployment

    def body() -> None:
        here = root()
        _show(cancel_deployment(here.ctx, deployment, identity(here.ctx, user), force=force))
        # Cancelled while closed: users get the running release back; after apply: its restore runs to the end.
        _show(here.engine.advance(deployment))

    run_guarded(body)


def drain(
    choice: str = typer.Argument(..., metavar="wait|abort", help="wait longer, or abort (users get the running release back)."),
    deployment: int = DEPLOYMENT_ARGUMENT,
    user: str = AS_OPTION,
    timeout: float = TIMEOUT_OPTION,
) -> None:
    """Answer a drain that passed its deadline: wait longer, or abort (users get the running release back)."""
    from bot.services.deployments import decide_drain

    def body() -> None:
        here = root()
        decide_drain(here.ctx, deployment, choice, identity(here.ctx, user))
        view = drive(here.ctx, deployment, lambda: here.engine.advance(deployment), timeout)
        _show(view)
        _outcome(view)

    run_guarded(body)


def admission(
    word: str = typer.Argument(..., metavar="open|close", help="What users reach: Kimi K3, or the fallback."),
    endpoint: str = typer.Argument(..., metavar="ENDPOINT", help="Endpoint."),
    reason: str = typer.Option(..., "--reason", metavar="TEXT", help="Why; recorded in the audit log and said in the channel."),
    user: str = AS_OPTION,
) -> None:
    """Admins: open or close what users reach of ENDPOINT by hand (after a failed restore, say)."""
    from bot.services.admission import override_admission

    def body() -> None:
        ctx = context()
        view = override_admission(ctx, endpoint, "open" if word == "open" else word, reason, identity(ctx, user))
        output.info(f"admission of {view.endpoint} is now {view.admission}: {view.users_get}")

    run_guarded(body)


def resume() -> None:
    """Continue every in-flight deployment from its stored state (after a restart), saying which it took and why it
    left the others; exit 1 when deployments needed driving and it could take none of them."""
    import datetime as dt

    from bot.cli.render import resumption_lines

    def body() -> None:
        done = root().engine.resume_each()
        if not done:
            output.info("no deployment in flight")
        now = dt.datetime.now(dt.UTC)
        for item in done:
            for line in resumption_lines(item, now):
                output.info(line)
        needed = [item for item in done if not item.waits_for_person]
        if needed and not any(item.taken for item in needed):
            raise typer.Exit(EXIT_REFUSED)

    run_guarded(body)


def history(
    endpoint: str = typer.Argument(None, metavar="ENDPOINT", help="Endpoint (optional when only one is configured)."),
    limit: int = typer.Option(20, "--limit", "-n", min=1, metavar="N", help="Show at most N deployments."),
    fmt: Format = OUTPUT_OPTION,
) -> None:
    """Deployments of an endpoint: release, kind, outcome and why, who requested and decided, durations."""
    from bot.cli.render import history_rows
    from bot.services.deployments import history as deployment_history
    from bot.services.errors import NoEndpoints

    def body() -> None:
        try:
            views = deployment_history(context(), endpoint, limit)
        except NoEndpoints as nothing:
            if endpoint:
                raise
            # Like `status`: nothing declared is an empty listing, not a failure.
            said = str(nothing)
            output.emit(fmt, [], lambda: output.info(said))
            return
        columns = ["#", "kind", "release", "outcome", "requested by", "gates (decided by)", "started (UTC)", "took",
                   "why"]
        output.emit(fmt, views, lambda: output.table("History", columns, history_rows(views), empty="no deployments yet"))

    run_guarded(body)


@gate_app.command("show")
def gate_show(deployment: int = DEPLOYMENT_ARGUMENT, fmt: Format = OUTPUT_OPTION, watch: bool = WATCH_OPTION,
              timeout: float = WATCH_TIMEOUT_OPTION) -> None:
    """Show a deployment, its gates and the report of the gate waiting for a decision (--watch: follow it)."""
    from bot.services.deployments import get_deployment

    def body() -> None:
        if watching(watch, fmt, timeout):
            follow(context(), deployment, timeout)
            return
        view = get_deployment(context(), deployment)
        output.emit(fmt, view, lambda: _show(view))

    run_guarded(body)


def _decide(deployment: int, named: str, decision: str, user: str | None, reason: str | None,
            override_reason: str | None = None, *, verbose: bool = False, timeout: float | None = None) -> None:
    from bot.services.deployments import decide_gate, get_deployment
    from bot.services.errors import Invalid, Refused, UserError

    def body() -> None:
        gate = gate_named(named)
        if decision == "rejected" and not (reason or "").strip():
            raise Invalid("say why the gate is rejected: --reason \"…\" is recorded and shown in the thread and the history")
        here = root()
        ctx = here.ctx
        who = identity(ctx, user)
        seen = get_deployment(ctx, deployment).pending
        if seen is None or seen.gate != gate:
            raise Refused(f"the {gate} gate of deployment #{deployment} is not waiting for a decision")
        try:
            decide_gate(ctx, deployment, gate, decision, who, seen_report_hash=seen.report_hash,
                        seen_release_hash=seen.release_hash, reason=reason, override_reason=override_reason)
        except UserError as refusal:
            # The one line that matters first; the report it was about only when asked for (-v).
            output.error(str(refusal))
            if verbose:
                _show(get_deployment(ctx, deployment))
            else:
                output.info(f"(the report: `kimi-ops gate show {deployment}`, or this command again with -v)")
            raise typer.Exit(refusal.exit_code) from None
        output.info(f"{decision} the {gate} gate of deployment #{deployment} (report {seen.report_hash[:12]})")
        view = drive(ctx, deployment, lambda: here.engine.advance(deployment), timeout)
        _show(view)
        if decision == "approved":
            _outcome(view)

    run_guarded(body)


@gate_app.command("approve")
def gate_approve(
    deployment: int = DEPLOYMENT_ARGUMENT,
    gate: str = GATE_ARGUMENT,
    override_limits: str = typer.Option(None, "--override-limits", metavar="REASON",
                                        help="Traffic gate: approve although the endpoint "
                                        "admits more than the sweep measured safe; say why (recorded)."),
    user: str = AS_OPTION,
    verbose: bool = VERBOSE_OPTION,
    timeout: float = TIMEOUT_OPTION,
) -> None:
    """Approve the waiting GATE of DEPLOYMENT (bound to its newest report: `gate show` prints it), printing progress."""
    _decide(deployment, gate, "approved", user, None, override_limits, verbose=verbose, timeout=timeout)


@gate_app.command("reject")
def gate_reject(
    deployment: int = DEPLOYMENT_ARGUMENT,
    gate: str = GATE_ARGUMENT,
    reason: str = typer.Option(..., "--reason", metavar="TEXT", help="Why, in words (not blank); recorded and shown in "
                               "the thread and the history."),
    user: str = AS_OPTION,
    verbose: bool = VERBOSE_OPTION,
) -> None:
    """Reject the waiting GATE of DEPLOYMENT; the deployment ends."""
    _decide(deployment, gate, "rejected", user, reason, verbose=verbose)


@gate_app.command("recheck")
def gate_recheck(
    deployment: int = DEPLOYMENT_ARGUMENT,
    gate: str = GATE_ARGUMENT,
    user: str = AS_OPTION,
) -> None:
    """Run the waiting GATE's automated checks again."""
    def body() -> None:
        here = root()
        view = here.engine.recheck(deployment, gate_named(gate), identity(here.ctx, user))
        _show(view)
        _outcome(view)

    run_guarded(body)


register_reports(gate_app)  # after the commands above: `gate --help` lists them first


def register(app: typer.Typer) -> None:
    app.command("deploy")(deploy)
    app.command("rollback")(rollback)
    app.command("cancel")(cancel)
    app.command("drain")(drain)
    app.command("admission")(admission)
    app.command("resume")(resume)
    app.command("history")(history)
    app.add_typer(gate_app, name="gate")
