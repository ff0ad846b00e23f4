"""The governance records a world needs before its artifact gate can pass: one helper for the sandbox and tests.

The artifact gate fails without a current licence review for the endpoint's
exposure and each release's licence version, and without a recorded security
exception for every ``--trust-remote-code`` a release asks for. Every world
that runs the real artifact checks (the sandbox, the demo, the whole-stack
tests) seeds them here, so a new governance rule is seeded in one place.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from bot.config import EndpointSettings
from bot.domain.governance import LicenceReview, SecurityException
from bot.domain.release import ReleaseManifest
from bot.services.context import Context

REVIEWER = "U0APPROVER1"
"""An approver of every world, never the one who requests its deployments."""
VALIDITY = dt.timedelta(days=180)


def governance_records(
    releases: Sequence[ReleaseManifest], endpoints: Iterable[EndpointSettings], now: dt.datetime
) -> tuple[list[LicenceReview], list[SecurityException]]:
    """A review per endpoint and licence version, and each trust-remote-code exception a release names."""
    endpoints = list(endpoints)
    versions = sorted({r.licence.version for r in releases})
    reviews = [
        LicenceReview(
            id=i, endpoint=endpoint.name, licence_version=version, reviewer=REVIEWER, reviewed_at=now,
            classification=endpoint.exposure, third_party_exposure=endpoint.exposure != "internal",
            maas_revenue_over_threshold=False, separate_agreement=None,
            attribution="none beyond the licence notice" if endpoint.exposure == "internal" else "Kimi K3 named in the product",
            expires_at=now + VALIDITY,
        )
        for i, (endpoint, version) in enumerate(((e, v) for e in endpoints for v in versions), start=1)
    ]
    exceptions = []
    for ident in sorted({r.trust_remote_code_exception for r in releases if r.trust_remote_code_exception}):
        naming = [r.name for r in releases if r.trust_remote_code_exception == ident]
        # An id is one record: for the one release that names it, or else for the world's one endpoint.
        if len(naming) == 1:
            scope, target = "release", naming[0]
        elif len(endpoints) == 1:
            scope, target = "endpoint", endpoints[0].name
        else:
            raise ValueError(f"releases {', '.join(naming)} share exception {ident}: give each its own id")
        exceptions.append(SecurityException(
            id=ident, kind="trust-remote-code", scope=scope, target=target, reviewer=REVIEWER,
            reason="Kimi K3's repository code reviewed at the pinned commit; egress restricted after staging",
            expires_at=now + VALIDITY, recorded_at=now,
        ))
    return reviews, exceptions


def seed_governance(ctx: Context, releases: Sequence[ReleaseManifest], endpoints: Iterable[EndpointSettings]) -> None:
    """Store :func:`governance_records` (with their audit rows) in the world's database."""
    now = ctx.clock.now()
    reviews, exceptions = governance_records(releases, endpoints, now)
    with ctx.uow() as uow:
        for review in reviews:
            stored = uow.governance.add_review(review)
            uow.audit.record(at=now, actor=REVIEWER, action="licence.reviewed", subject=f"endpoint:{review.endpoint}",
                             details={"review": stored.id, "licence_version": review.licence_version, "seeded": True})
        for exception in exceptions:
            if uow.governance.exception(exception.id) is None:
                uow.governance.add_exception(exception)
                uow.audit.record(at=now, actor=REVIEWER, action="exception.recorded", subject=f"exception:{exception.id}",
                                 details={"kind": exception.kind, "seeded": True})
        uow.commit()
