"""Licence reviews and security exceptions: recorded by approvers, audited, read by the artifact gate.

A licence review is per endpoint (its exposure: internal, third-party, or
Model-as-a-Service) and per licence version, and expires; a security exception
(trust-remote-code, an unscanned image, payload capture, a tensor-parallel
size other than the node's eight GPUs) is scoped to one release or endpoint
and expires. Both are recorded by an approver who is not the requester of an
in-flight deployment on that endpoint (the record would unblock their own
deployment), each with an audit row; bad input is refused with one line and
nothing stored. :func:`artifact_policy` gathers what the artifact gate judges
a release by for one endpoint.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from bot.adapters.store.repositories import Conflict
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.governance import (
    EXCEPTION_KINDS,
    EXPOSURES,
    ArtifactPolicy,
    LicenceReview,
    SecurityException,
)
from bot.services.access import Identity, authorize
from bot.services.context import Context
from bot.services.errors import NotFound, Refused

EXCEPTION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_TEXT = 1000
MAX_VALIDITY = dt.timedelta(days=366)


@dataclass(frozen=True)
class ReviewRequest:
    """What an approver attests in a licence review (the reviewer is whoever records it)."""

    endpoint: str
    licence_version: str
    classification: str
    third_party_exposure: bool
    maas_revenue_over_threshold: bool
    attribution: str
    expires_at: dt.datetime
    separate_agreement: str | None = None


@dataclass(frozen=True)
class ExceptionRequest:
    id: str
    kind: str
    scope: str
    target: str
    reason: str
    expires_at: dt.datetime


def artifact_policy(ctx: Context, endpoint: EndpointSettings | None, requester: str | None = None) -> ArtifactPolicy:
    """What ``endpoint`` holds a release to: its roles and ceiling, its reviews, the exceptions; ``None``: no endpoint."""
    with ctx.uow() as uow:
        exceptions = tuple(uow.governance.exceptions())
        reviews = tuple(uow.governance.reviews(endpoint.name)) if endpoint is not None else ()
    now = ctx.clock.now()
    if endpoint is None:
        return ArtifactPolicy(exceptions=exceptions, now=now)
    return ArtifactPolicy(
        endpoint=endpoint.name,
        inference_roles=tuple(endpoint.inference_roles),
        max_model_len=endpoint.max_model_len,
        exposure=endpoint.exposure,
        requester=requester,
        licence_reviews=reviews,
        exceptions=exceptions,
        now=now,
    )


def _endpoint(uow: SqlUnitOfWork, ctx: Context, name: str) -> EndpointSettings:
    row = uow.endpoints.get(name)
    if row is not None:
        return EndpointSettings.model_validate(row.settings)
    configured = ctx.settings.endpoint(name)
    if configured is None:
        known = ", ".join(e.name for e in ctx.settings.endpoints) or "none"
        raise NotFound(f"no endpoint named {name}; known endpoints: {known}")
    return configured


def _not_unblocking_own(uow: SqlUnitOfWork, endpoint: str, actor: Identity) -> None:
    row = uow.endpoints.get(endpoint)
    holder = uow.deployments.in_flight(row.id) if row is not None else None
    if holder is not None and holder.requested_by == actor.user_id:
        raise Refused(f"you requested deployment #{holder.id} on {endpoint}, which this record would unblock; "
                      "another approver must record it")


def _text(value: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise Refused(f"{what} is required")
    if len(value) > MAX_TEXT:
        raise Refused(f"{what} is {len(value):,} characters; at most {MAX_TEXT:,}")
    return value


def _expiry(ctx: Context, expires_at: dt.datetime) -> dt.datetime:
    now = ctx.clock.now()
    if expires_at.tzinfo is None:
        expires_at = expires_at.replace(tzinfo=dt.UTC)
    if expires_at <= now:
        raise Refused(f"the expiry {expires_at:%Y-%m-%d} is not in the future; give a date such as "
                      f"{now + dt.timedelta(days=90):%Y-%m-%d}")
    if expires_at - now > MAX_VALIDITY:
        raise Refused("a record holds at most a year; review it again then")
    return expires_at


def record_licence_review(ctx: Context, actor: Identity, request: ReviewRequest) -> LicenceReview:
    """Store an approver's licence review for an endpoint (audited); refused with one line when it cannot hold."""
    authorize(ctx, actor, "review", f"endpoint:{request.endpoint}")
    if request.classification not in EXPOSURES:
        raise Refused(f"classification must be one of {', '.join(EXPOSURES)}, not {request.classification[:40]!r}")
    if request.third_party_exposure != (request.classification != "internal"):
        raise Refused("third-party exposure must be yes for a third-party or Model-as-a-Service product, "
                      "and no for an internal one")
    agreement = (request.separate_agreement or "").strip() or None
    if request.maas_revenue_over_threshold and agreement is None:
        raise Refused("above $20M of Model-as-a-Service revenue over 12 months the licence needs a separate agreement "
                      "with Moonshot; give its reference with --agreement")
    version = _text(request.licence_version, "the licence version")
    attribution = _text(request.attribution, "the attribution obligations (e.g. 'none: internal use')")
    expires_at = _expiry(ctx, request.expires_at)
    with ctx.uow() as uow:
        endpoint = _endpoint(uow, ctx, request.endpoint)
        if endpoint.exposure != request.classification:
            raise Refused(f"endpoint {endpoint.name} is configured with exposure {endpoint.exposure}; a review "
                          f"classifying it {request.classification} would not match it")
        _not_unblocking_own(uow, endpoint.name, actor)
        review = uow.governance.add_review(LicenceReview(
            id=0, endpoint=endpoint.name, licence_version=version, reviewer=actor.user_id, reviewed_at=ctx.clock.now(),
            classification=request.classification, third_party_exposure=request.third_party_exposure,
            maas_revenue_over_threshold=request.maas_revenue_over_threshold, separate_agreement=agreement,
            attribution=attribution, expires_at=expires_at,
        ))
        uow.audit.record(at=ctx.clock.now(), actor=actor.user_id, action="licence.reviewed",
                         subject=f"endpoint:{endpoint.name}",
                         details={"review": review.id, "licence_version": version,
                                  "classification": review.classification,
                                  "maas_revenue_over_threshold": review.maas_revenue_over_threshold,
                                  "expires_at": expires_at.isoformat()})
        uow.commit()
    return review


def _exception_allowed(ctx: Context, uow: SqlUnitOfWork, actor: Identity, ident: str, kind: str, scope: str,
                       target: str) -> None:
    """What must hold before an exception is recorded (its reason and expiry aside)."""
    if not EXCEPTION_ID.match(ident):
        raise Refused("an exception id is letters, digits, '.', '_' or '-' (at most 64), e.g. SEC-EXC-2026-0142")
    if kind not in EXCEPTION_KINDS:
        raise Refused(f"the kind must be one of {', '.join(EXCEPTION_KINDS)}, not {kind[:40]!r}")
    if scope not in ("release", "endpoint"):
        raise Refused("an exception is scoped to one release or one endpoint")
    if scope == "release":
        if uow.releases.get(target) is None:
            raise NotFound(f"no release named {target}; register it first")
        for row in uow.endpoints.list():
            holder = uow.deployments.in_flight(row.id)
            if holder is not None and holder.release.name == target:
                _not_unblocking_own(uow, row.name, actor)
    else:
        _not_unblocking_own(uow, _endpoint(uow, ctx, target).name, actor)
    if uow.governance.exception(ident) is not None:
        raise Refused(f"security exception {ident} is already recorded; records are not changed, give a new id")


def may_record_exception(ctx: Context, actor: Identity, ident: str, kind: str, scope: str, target: str) -> None:
    """Before a form asks for the reason and expiry: refuse (and audit) what :func:`record_exception` would refuse."""
    authorize(ctx, actor, "review", f"exception:{ident[:64]}")
    with ctx.uow() as uow:
        _exception_allowed(ctx, uow, actor, ident, kind, scope, target)


def record_exception(ctx: Context, actor: Identity, request: ExceptionRequest) -> SecurityException:
    """Store a reviewed security exception (audited); its id is what a release names."""
    authorize(ctx, actor, "review", f"exception:{request.id[:64]}")
    with ctx.uow() as uow:
        _exception_allowed(ctx, uow, actor, request.id, request.kind, request.scope, request.target)
        reason = _text(request.reason, "the reason")
        expires_at = _expiry(ctx, request.expires_at)
        try:
            recorded = uow.governance.add_exception(SecurityException(
                id=request.id, kind=request.kind, scope=request.scope, target=request.target, reviewer=actor.user_id,
                reason=reason, expires_at=expires_at, recorded_at=ctx.clock.now(),
            ))
        except Conflict:
            raise Refused(f"security exception {request.id} is already recorded") from None
        uow.audit.record(at=ctx.clock.now(), actor=actor.user_id, action="exception.recorded",
                         subject=f"exception:{request.id}",
                         details={"kind": request.kind, "scope": request.scope, "target": request.target,
                                  "expires_at": expires_at.isoformat()})
        uow.commit()
    return recorded


def list_exceptions(ctx: Context, actor: Identity, *, include_expired: bool = False) -> list[SecurityException]:
    authorize(ctx, actor, "view", "exceptions")
    with ctx.uow() as uow:
        return uow.governance.exceptions(current_at=None if include_expired else ctx.clock.now())


def list_reviews(ctx: Context, actor: Identity, endpoint: str | None = None) -> list[LicenceReview]:
    authorize(ctx, actor, "view", "licence reviews")
    with ctx.uow() as uow:
        return uow.governance.reviews(endpoint)
