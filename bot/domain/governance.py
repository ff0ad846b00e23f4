"""What the artifact gate holds a release to beyond the tuple itself: the endpoint's rules and the records.

A release is judged for one endpoint: the role(s) allowed to read its weights,
the longest context that endpoint offers, the licence review recorded for that
endpoint's exposure and the release's licence version, and the security
exceptions recorded for the release or the endpoint. :class:`ArtifactPolicy`
carries them, plain data, from the service (which reads settings and the
store) to the pure rules here and in :mod:`bot.domain.artifact_checks`. An
empty policy is the strictest: nothing is configured, nothing is recorded, so
every rule that needs a record fails.

The guide's licence terms: a product above $20 million of Model-as-a-Service
revenue over 12 months needs a separate agreement with Moonshot, and large
products carry attribution requirements; a review is per endpoint (its
exposure) and per licence version, and expires.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from bot.domain.checks import Check

NODE_GPUS = 8
"""The guide's launch: one p6-b300.48xlarge, tensor parallelism across all eight GPUs."""

Exposure = Literal["internal", "third-party", "maas"]
EXPOSURES: tuple[Exposure, ...] = ("internal", "third-party", "maas")
ExceptionKind = Literal["trust-remote-code", "unscanned-image", "payload-capture", "tensor-parallel", "side-door"]
EXCEPTION_KINDS: tuple[ExceptionKind, ...] = ("trust-remote-code", "unscanned-image", "payload-capture", "tensor-parallel",
                                              "side-door")
"""``side-door``: a production endpoint reached by something besides its route (a SageMaker endpoint and its ALB)."""
Scope = Literal["release", "endpoint"]
MAAS_THRESHOLD_USD = 20_000_000
"""Model-as-a-Service revenue over 12 months above which Moonshot's licence asks for a separate agreement."""


@dataclass(frozen=True)
class SecurityException:
    """A reviewed exception to a security rule, for one release or one endpoint, until it expires."""

    id: str
    kind: str
    scope: str
    target: str
    reviewer: str
    reason: str
    expires_at: dt.datetime
    recorded_at: dt.datetime

    def current(self, now: dt.datetime) -> bool:
        return now < self.expires_at

    def covers(self, kind: str, *, release: str | None, endpoint: str | None) -> bool:
        """Of ``kind`` and scoped to this release or this endpoint."""
        target = release if self.scope == "release" else endpoint
        return self.kind == kind and target is not None and self.target == target


@dataclass(frozen=True)
class LicenceReview:
    """Who reviewed the licence for an endpoint's exposure, what they attested, and until when it holds."""

    id: int
    endpoint: str
    licence_version: str
    reviewer: str
    reviewed_at: dt.datetime
    classification: str
    third_party_exposure: bool
    maas_revenue_over_threshold: bool
    separate_agreement: str | None
    attribution: str
    expires_at: dt.datetime


@dataclass(frozen=True)
class ArtifactPolicy:
    """The endpoint-side facts and records the artifact checks need; ``endpoint`` is ``None`` when none was named."""

    endpoint: str | None = None
    inference_roles: tuple[str, ...] = ()
    max_model_len: int | None = None
    gpus: int = NODE_GPUS
    exposure: str | None = None
    requester: str | None = None
    licence_reviews: tuple[LicenceReview, ...] = ()
    exceptions: tuple[SecurityException, ...] = ()
    now: dt.datetime | None = None

    def exception(self, kind: str, release: str | None) -> tuple[SecurityException | None, str | None]:
        """The current exception of ``kind`` for ``release`` or this endpoint, else ``(None, why not)``."""
        matching = [e for e in self.exceptions if e.covers(kind, release=release, endpoint=self.endpoint)]
        if not matching:
            return None, f"no {kind} exception is recorded for this release or endpoint"
        live = [e for e in matching if self.now is not None and e.current(self.now)]
        if not live:
            newest = max(matching, key=lambda e: e.expires_at)
            return None, f"security exception {newest.id} expired {newest.expires_at:%Y-%m-%d %H:%M} UTC"
        return max(live, key=lambda e: e.expires_at), None

    def named_exception(self, ident: str, kind: str, release: str) -> tuple[SecurityException | None, str | None]:
        """The exception a release names by id: it must exist, be of ``kind``, cover the release and be current."""
        found = next((e for e in self.exceptions if e.id == ident), None)
        if found is None:
            return None, f"security exception {ident} is not recorded; record it with `kimi-ops exception add`"
        if found.kind != kind:
            return None, f"security exception {ident} is for {found.kind}, not {kind}"
        if not found.covers(kind, release=release, endpoint=self.endpoint):
            return None, f"security exception {ident} covers {found.scope} {found.target}, not this release or endpoint"
        if self.now is None or not found.current(self.now):
            return None, f"security exception {ident} expired {found.expires_at:%Y-%m-%d %H:%M} UTC"
        return found, None


def allowed_by(exception: SecurityException) -> str:
    return f"security exception {exception.id} ({exception.reviewer}, until {exception.expires_at:%Y-%m-%d})"


def licence_review_check(policy: ArtifactPolicy, licence_version: str) -> Check:
    """A current review for this endpoint's exposure and this licence version, by someone other than the requester."""
    name = "licence.review"
    if policy.endpoint is None:
        return Check.failed(name, "no endpoint named: a licence review is per endpoint; name the endpoint it is for")
    fix = (f"an approver records one with `kimi-ops licence review {policy.endpoint} --licence-version {licence_version} …`"
           " or `/kimi licence review …`")
    mine = [r for r in policy.licence_reviews if r.endpoint == policy.endpoint]
    if not mine:
        return Check.failed(name, f"no licence review is recorded for endpoint {policy.endpoint}; {fix}")
    versioned = [r for r in mine if r.licence_version == licence_version]
    if not versioned:
        seen = ", ".join(sorted({r.licence_version for r in mine}))
        return Check.failed(name, f"the licence reviews of {policy.endpoint} cover {seen}, not {licence_version}; {fix}")
    latest = max(versioned, key=lambda r: (r.reviewed_at, r.id))
    if latest.classification != policy.exposure:
        return Check.failed(
            name,
            f"review #{latest.id} classified the product {latest.classification}, but the endpoint's exposure is now "
            f"{policy.exposure}: the exposure changed, so the licence needs a new review; {fix}",
        )
    if policy.now is None or latest.expires_at <= policy.now:
        return Check.failed(name, f"review #{latest.id} expired {latest.expires_at:%Y-%m-%d} UTC; {fix}")
    if latest.maas_revenue_over_threshold and not latest.separate_agreement:
        return Check.failed(
            name,
            f"review #{latest.id} attests Model-as-a-Service revenue above ${MAAS_THRESHOLD_USD:,} over 12 months "
            "without a separate agreement with Moonshot; record the agreement's reference in a new review",
        )
    if policy.requester is not None and latest.reviewer == policy.requester:
        return Check.failed(
            name, f"review #{latest.id} was recorded by {latest.reviewer}, who requested this deployment; another approver "
            "must review the licence",
        )
    exposure = "third-party exposure" if latest.third_party_exposure else "no third-party exposure"
    return Check.passed(
        name,
        f"review #{latest.id} by {latest.reviewer} ({latest.reviewed_at:%Y-%m-%d}): {latest.classification}, {exposure}, "
        f"attribution: {latest.attribution}; until {latest.expires_at:%Y-%m-%d}",
        review=latest.id,
    )
