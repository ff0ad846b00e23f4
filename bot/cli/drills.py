"""``kimi-ops drill`` and ``kimi-ops drills``: availability drills from a terminal.

``kimi-ops drill ENDPOINT KIND [--accept-user-impact]`` asks for one, ``kimi-ops drill approve N`` approves
someone else's and runs it here to its end (exit 1 when it failed), ``kimi-ops drill reject N --reason "…"``
rejects it; ``kimi-ops drills ENDPOINT -o table|json|yaml`` lists the last ones. The same roles and the
same rule (the requester never approves) hold as in Slack.
"""

from __future__ import annotations

import typer

from bot.cli import output
from bot.cli.common import identity
from bot.cli.conventions import EXIT_REFUSED, OUTPUT_OPTION, Format
from bot.cli.guard import run_guarded
from bot.cli.options import AS_OPTION


def drill(
    words: list[str] = typer.Argument(..., metavar="ENDPOINT KIND | approve N | reject N",
                                      help="KIND: pod-deletion, model-load-failure, artifact-outage, reservation-expiry, "
                                           "bad-release, node-loss."),
    accept_user_impact: bool = typer.Option(False, "--accept-user-impact",
                                            help="Run it although users are admitted (their requests fail meanwhile)."),
    reason: str = typer.Option(None, "--reason", metavar="TEXT", help="Why a drill is rejected (reject only)."),
    user: str = AS_OPTION,
) -> None:
    """Ask for an availability drill, or approve (and run) or reject someone else's."""
    from bot.cli.common import context
    from bot.services.drills import check_kind, decide_drill, request_drill, run_drill
    from bot.services.errors import Invalid, Refused

    def body() -> None:
        head = words[0].lower()
        if head in ("approve", "reject"):
            if len(words) != 2 or not words[1].lstrip("#").isdigit():
                raise Invalid(f"say which drill to {head} by its number: kimi-ops drill {head} N")
            number = int(words[1].lstrip("#"))
            if head == "reject" and not (reason or "").strip():
                raise Invalid('say why the drill is rejected: --reason "…" is recorded and said in the channel')
            ctx = context()
            actor = identity(ctx, user)
            if head == "reject":
                view = decide_drill(ctx, actor, number, approve=False, reason=reason or "")
                output.info(f"drill #{view.id} ({view.kind} on {view.endpoint}) rejected: {view.reason}")
                return
            view = decide_drill(ctx, actor, number, approve=True)
            output.info(f"drill #{view.id} ({view.kind} on {view.endpoint}) approved; running it here")
            ended = run_drill(ctx, view.id)
            output.info(ended.line)
            if not ended.passed:
                raise typer.Exit(EXIT_REFUSED)
            return
        if len(words) != 2:
            raise Invalid("name the endpoint, then the kind: kimi-ops drill ENDPOINT KIND [--accept-user-impact]")
        try:
            kind = check_kind(words[1])
        except Refused as exc:  # a wrong kind is a wrong command line (exit 2), seen before anything is read
            raise Invalid(str(exc)) from None
        ctx = context()
        view = request_drill(ctx, identity(ctx, user), words[0], kind, accept_user_impact=accept_user_impact)
        output.info(f"drill #{view.id} ({view.kind} on {view.endpoint}) waits for an approver other than you: "
                    f"`/kimi drill approve {view.id}` or `/kimi drill reject {view.id} REASON`")

    run_guarded(body)


def drills(endpoint: str = typer.Argument(..., metavar="ENDPOINT", help="Endpoint."),
           limit: int = typer.Option(10, "--limit", "-n", min=1, max=50, help="How many drills, newest first."),
           user: str = AS_OPTION, fmt: Format = OUTPUT_OPTION) -> None:
    """An endpoint's last availability drills: kind, outcome, detection and recovery time, alerts."""
    from bot.cli.common import context
    from bot.services.drills import list_drills
    from bot.views.drills import HEADER, drill_rows

    def body() -> None:
        ctx = context()
        views = list_drills(ctx, identity(ctx, user), endpoint, limit)
        output.emit(fmt, views, lambda: output.table(f"Last availability drills of {endpoint}", HEADER,
                                                     [tuple(r) for r in drill_rows(views)],
                                                     empty="no drill yet: kimi-ops drill ENDPOINT KIND asks for one"))

    run_guarded(body)


def register(root: typer.Typer) -> None:
    """Add ``drill`` and ``drills`` to the root CLI."""
    root.command("drill")(drill)
    root.command("drills")(drills)
