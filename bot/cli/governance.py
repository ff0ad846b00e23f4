"""``kimi-ops licence review|list`` and ``kimi-ops exception add|list``: the records the artifact gate requires.

Each command acts as a Slack identity (``--as U…`` or ``KIMI_CLI_USER``): an
approver records, and never for a deployment they requested themselves.
"""

from __future__ import annotations

import datetime as dt

import typer

from bot.cli import output
from bot.cli.common import context, identity
from bot.cli.conventions import OUTPUT_OPTION, Format, typer_app
from bot.cli.guard import run_guarded
from bot.cli.options import AS_OPTION

licence_app = typer_app(help="Licence reviews per endpoint and licence version.")
exception_app = typer_app(help="Security exceptions (trust-remote-code, unscanned image, …).")
EXPIRES = typer.Option(..., "--expires", help="Last day the record holds (YYYY-MM-DD, UTC), at most a year ahead.")


def _day(text: str) -> dt.datetime:
    from bot.services.errors import Refused

    try:
        day = dt.date.fromisoformat(text.strip())
    except ValueError:
        raise Refused(f"--expires {text[:40]!r} is not a date; write YYYY-MM-DD") from None
    return dt.datetime.combine(day, dt.time.max, tzinfo=dt.UTC)


@licence_app.command("review")
def review(
    endpoint: str = typer.Argument(..., help="Endpoint whose exposure the review classifies."),
    licence_version: str = typer.Option(..., "--licence-version", help="Licence version reviewed (a release's licence.version)."),
    classification: str = typer.Option(..., "--classification", help="internal, third-party or maas (Model-as-a-Service)."),
    third_party: bool = typer.Option(..., "--third-party/--no-third-party", help="Do third parties reach the model?"),
    maas_over: bool = typer.Option(
        ..., "--maas-over-20m/--maas-under-20m",
        help="Attest Model-as-a-Service revenue over 12 months above (or below) $20 million.",
    ),
    attribution: str = typer.Option(..., "--attribution", help="Attribution obligations (e.g. 'none: internal use')."),
    expires: str = EXPIRES,
    agreement: str | None = typer.Option(None, "--agreement", help="Reference of the separate agreement with Moonshot."),
    user: str = AS_OPTION,
) -> None:
    """Record a licence review for ENDPOINT (approvers; audited)."""
    from bot.services.governance import ReviewRequest, record_licence_review

    def body() -> None:
        ctx = context()
        stored = record_licence_review(ctx, identity(ctx, user), ReviewRequest(
            endpoint=endpoint, licence_version=licence_version, classification=classification,
            third_party_exposure=third_party, maas_revenue_over_threshold=maas_over, attribution=attribution,
            expires_at=_day(expires), separate_agreement=agreement,
        ))
        output.info(f"licence review #{stored.id} recorded for {stored.endpoint} ({stored.licence_version}, "
                    f"{stored.classification}) until {stored.expires_at:%Y-%m-%d}")

    run_guarded(body)


@licence_app.command("list")
def list_reviews(
    endpoint: str | None = typer.Argument(None, help="Only this endpoint's reviews."), user: str = AS_OPTION,
    fmt: Format = OUTPUT_OPTION,
) -> None:
    """Licence reviews, newest first."""
    from bot.services.governance import list_reviews as reviews

    def body() -> None:
        ctx = context()
        found = reviews(ctx, identity(ctx, user), endpoint)
        rows = [(r.id, r.endpoint, r.licence_version, r.classification, r.reviewer, f"{r.reviewed_at:%Y-%m-%d}",
                 f"{r.expires_at:%Y-%m-%d}", r.attribution) for r in found]
        output.emit(fmt, found, lambda: output.table(
            "Licence reviews", ["#", "endpoint", "licence", "exposure", "reviewer", "reviewed", "expires",
                                "attribution"], rows))

    run_guarded(body)


@exception_app.command("add")
def add_exception(
    ident: str = typer.Argument(..., help="Exception id, e.g. SEC-EXC-2026-0142 (what a release names)."),
    kind: str = typer.Option(
        ..., "--kind", help="trust-remote-code, unscanned-image, payload-capture, tensor-parallel or side-door."),
    release: str | None = typer.Option(None, "--release", help="Scope: this release."),
    endpoint: str | None = typer.Option(None, "--endpoint", help="Scope: this endpoint."),
    reason: str = typer.Option(..., "--reason", help="Why the rule may be broken here."),
    expires: str = EXPIRES,
    user: str = AS_OPTION,
) -> None:
    """Record a reviewed security exception (approvers; audited)."""
    from bot.services.errors import Refused
    from bot.services.governance import ExceptionRequest, record_exception

    def body() -> None:
        if (release is None) == (endpoint is None):
            raise Refused("scope the exception to one release (--release NAME) or one endpoint (--endpoint NAME)")
        scope, target = ("release", release) if release is not None else ("endpoint", endpoint)
        ctx = context()
        stored = record_exception(ctx, identity(ctx, user), ExceptionRequest(
            id=ident, kind=kind, scope=scope, target=str(target), reason=reason, expires_at=_day(expires),
        ))
        output.info(f"security exception {stored.id} ({stored.kind}) recorded for {stored.scope} {stored.target} "
                    f"until {stored.expires_at:%Y-%m-%d}")

    run_guarded(body)


@exception_app.command("list")
def list_exceptions(
    include_expired: bool = typer.Option(False, "--all", help="Expired ones too."), user: str = AS_OPTION,
    fmt: Format = OUTPUT_OPTION,
) -> None:
    """Security exceptions, soonest expiry first."""
    from bot.services.governance import list_exceptions as exceptions

    def body() -> None:
        ctx = context()
        found = exceptions(ctx, identity(ctx, user), include_expired=include_expired)
        rows = [(e.id, e.kind, f"{e.scope} {e.target}", e.reviewer, f"{e.expires_at:%Y-%m-%d}", e.reason)
                for e in found]
        output.emit(fmt, found, lambda: output.table(
            "Security exceptions", ["id", "kind", "scope", "reviewer", "expires", "reason"], rows))

    run_guarded(body)


def register(app: typer.Typer) -> None:
    app.add_typer(licence_app, name="licence")
    app.add_typer(exception_app, name="exception")
