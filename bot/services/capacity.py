"""Capacity reviews: when production's mix moves, the review it asks for, and the context-length guard.

* :func:`watch_mix` runs inside the metrics watch's transaction: it stores the live mix read from vLLM's
  request histograms and compares it with the mix the endpoint's last capacity review measured
  (:func:`bot.domain.traffic_mix.mix_drift`: p90 prompt length, long-context share, image share, peak
  concurrency against the accepted limit). A drift opens one ``capacity-review`` incident — "capacity review
  due" in the endpoint's channel, with the numbers and the command — and recovers it once the mix is back
  or a new review measured it.
* :func:`capacity_view` is what ``/kimi capacity`` and ``kimi-ops capacity`` show: the last review, the live
  mix, a registered trace and the drift.
* :func:`capacity_sweep` runs a review on demand, never on users: only on the idle side of a pair or on a
  single endpoint whose admission is closed.
* :func:`context_review_check` is the infrastructure gate's refusal of a raised ``max_model_len`` without a
  capacity review recorded since.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from bot.adapters.store.models import CapacityReview, Endpoint
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.checks import Check, GateReport
from bot.domain.readiness import MetricsSnapshot
from bot.domain.traffic_mix import TrafficMix, mix_drift
from bot.services.access import Identity, authorize
from bot.services.context import Context
from bot.services.errors import NotFound, Refused
from bot.services.incidents import Incidents
from bot.services.pair_sides import service_settings, users_side
from bot.services.releases import manifest_from_row
from bot.services.traffic_gate import run_traffic_gate
from bot.services.traffic_mix import stored_live_mix, update_live_mix
from bot.services.transitions import live_deployment

CAPACITY_KIND = "capacity-review"


def command(name: str) -> str:
    return f"`kimi-ops capacity {name} --sweep` (on the idle side of a pair, or with admission closed)"


def reviewed_mix(review: CapacityReview) -> TrafficMix:
    """The mix a review measured: production's when it knew one, else the fixed prompt it sent."""
    if review.production_mix:
        return TrafficMix.model_validate(review.production_mix)
    prompts = review.workload.get("prompt_tokens") or {}
    top = int(prompts.get("max") or 0)
    return TrafficMix(source="fixed", requests=0, prompt_p50=top, prompt_p90=top, prompt_p99=top,
                      output_p50=0, output_p90=0, output_p99=0)


def accepted_limit(row: Endpoint) -> int:
    """The concurrency the endpoint admits: limits accepted from a traffic gate (kept on its stored settings, not in
    the settings file), else the declared ones."""
    return EndpointSettings.model_validate(row.settings).effective_request_limits.max_concurrent_requests


def drift_of(uow: SqlUnitOfWork, row: Endpoint, live: TrafficMix | None) -> list[str] | None:
    """What moved since the last review; None when there is nothing to compare (no review or no live mix)."""
    review = uow.capacity.last_review(row.id)
    if review is None or live is None:
        return None
    return mix_drift(live, reviewed_mix(review), accepted_limit=accepted_limit(row))


def watch_mix(ctx: Context, uow: SqlUnitOfWork, row: Endpoint, spec: EndpointSettings, metrics: MetricsSnapshot,
              incidents: Incidents) -> tuple[list[str], list[str]]:
    """Store the live mix and open or close the endpoint's ``capacity-review`` incident: (opened, closed)."""
    moved = drift_of(uow, row, update_live_mix(uow, row, metrics, ctx))
    if moved is None:
        return [], []
    if moved:
        opened = incidents.open(CAPACITY_KIND, "warn", f"capacity review due: {'; '.join(moved)}; run {command(spec.name)}")
        return ([CAPACITY_KIND] if opened else []), []
    closed = incidents.close(CAPACITY_KIND, "the live mix is within what the last capacity review measured")
    return [], ([CAPACITY_KIND] if closed else [])


@dataclass(frozen=True)
class CapacityView:
    endpoint: str
    max_model_len: int
    accepted_limit: int
    last_review: dict[str, Any] | None
    live_mix: TrafficMix | None
    live_at: dt.datetime | None
    trace: dict[str, Any] | None
    drift: list[str] | None  # None: nothing to compare yet

    def as_dict(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "max_model_len": self.max_model_len, "accepted_limit": self.accepted_limit,
                "last_review": self.last_review,
                "live_mix": self.live_mix.model_dump(mode="json") if self.live_mix else None,
                "live_at": self.live_at.isoformat() if self.live_at else None, "trace": self.trace,
                "drift": self.drift, "review_due": bool(self.drift)}


def _review_dict(review: CapacityReview) -> dict[str, Any]:
    return {"id": review.id, "at": review.at.isoformat(), "kind": review.kind, "by": review.actor,
            "release": review.release, "deployment_id": review.deployment_id, "knee": review.knee,
            "max_model_len": review.max_model_len, "proposal": review.proposal, "workload": review.workload,
            "production_mix": review.production_mix}


def capacity_view(ctx: Context, name: str) -> CapacityView:
    with ctx.uow() as uow:
        row = uow.endpoints.get(name)
        if row is None:
            raise NotFound(f"no endpoint named {name}; `kimi-ops status` lists them")
        spec = ctx.settings.endpoint(name) or EndpointSettings.model_validate(row.settings)
        review = uow.capacity.last_review(row.id)
        live_row = uow.capacity.live_mix(row.id)
        live = stored_live_mix(uow, row.id)
        trace = uow.capacity.trace(row.id)
        return CapacityView(
            endpoint=name, max_model_len=spec.max_model_len,
            accepted_limit=accepted_limit(row),
            last_review=_review_dict(review) if review else None, live_mix=live,
            live_at=live_row.at if live_row else None,
            trace={"sha256": trace.sha256, "at": trace.at.isoformat(), "by": trace.registered_by, "mix": trace.mix}
            if trace else None,
            drift=drift_of(uow, row, live))


def capacity_sweep(ctx: Context, name: str, actor: Identity) -> GateReport:
    """A capacity review on demand against an idle side of a pair or a single endpoint closed to users."""
    authorize(ctx, actor, "recheck", f"endpoint:{name}")
    with ctx.uow() as uow:
        row = uow.endpoints.get(name)
        if row is None:
            raise NotFound(f"no endpoint named {name}; `kimi-ops status` lists them")
        spec = ctx.settings.endpoint(name) or EndpointSettings.model_validate(row.settings)
        service = service_settings(ctx, spec.pair.service) if spec.pair else None
        if service is not None:
            serving = users_side(uow, service)
            if serving is not None and serving.id == row.id:
                raise Refused(f"{name} serves the users of {service.name}: a capacity sweep never runs on users; "
                              f"sweep its idle side {spec.pair.partner if spec.pair else ''}")
        elif row.admission != "closed":
            raise Refused(f"{name} admits users ({row.admission}): a capacity sweep never runs on users; close its "
                          f"admission first (`/kimi admission {name} close`) or sweep the idle side of a pair")
        holder = uow.deployments.in_flight(row.id)
        if holder is not None:
            raise Refused(f"deployment #{holder.id} is in flight on {name}; its traffic gate is its capacity review")
        live = live_deployment(uow, row.id)
        manifest = manifest_from_row(live.release) if live is not None else None
        release = live.release.name if live is not None else None
    return run_traffic_gate(ctx, spec, release, manifest=manifest, kind="on-demand", actor=actor.user_id)


def context_review_check(ctx: Context, endpoint: EndpointSettings) -> Check:
    """Refuse a ``max_model_len`` raised since the endpoint's last capacity review (none yet: the traffic gate's)."""
    with ctx.uow() as uow:
        row = uow.endpoints.get(endpoint.name)
        review = uow.capacity.last_review(row.id) if row is not None else None
        last = (review.id, review.at, review.max_model_len) if review is not None else None
    if last is None:
        return Check.passed("capacity.context", f"no capacity review yet on {endpoint.name}: this deployment's traffic "
                                                f"gate measures max_model_len {endpoint.max_model_len:,} first")
    number, at, measured = last
    if endpoint.max_model_len > measured:
        return Check.failed("capacity.context",
                            f"max_model_len was raised from {measured:,} to {endpoint.max_model_len:,} "
                            f"tokens after the last capacity review (#{number}, {at:%Y-%m-%d %H:%M} UTC); "
                            f"run {command(endpoint.name)} first", review_id=number)
    return Check.passed("capacity.context", f"max_model_len {endpoint.max_model_len:,} was measured by capacity review "
                                            f"#{number} ({at:%Y-%m-%d})")
