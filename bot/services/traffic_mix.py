"""Production's traffic mix per endpoint, and the sweep's workload synthesised from it.

The metrics watch reads the live mix from vLLM's request histograms each minute
(:func:`update_live_mix`, inside the watch's transaction); an operator may register
a redacted trace instead (:func:`register_trace`: validated, hashed, audited). The
traffic gate replays :func:`production_mix` — the endpoint's registered trace, else
its live mix, else (a side of a pair) its partner's, where the users are — through
:func:`workload_for`, and :func:`record_review` keeps what each sweep measured.
No request payload is read or stored on any of these paths: a mix is lengths and shares.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from bot.adapters.store.models import CapacityReview, Endpoint
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.readiness import MetricsSnapshot
from bot.domain.redacted_trace import TraceError, mix_from_trace, parse_trace
from bot.domain.release import ReleaseManifest
from bot.domain.slo import bucket_delta, counter_delta
from bot.domain.sweep import SweepPlan
from bot.domain.traffic_mix import TrafficMix, mix_from_histograms
from bot.domain.workload import Workload, served_context, served_multimodal, synthesise
from bot.services.access import Identity, authorize
from bot.services.context import Context
from bot.services.errors import NotFound, Refused

WINDOW = dt.timedelta(hours=24)  # the live mix is what production sent over the last day
MARK_EVERY = dt.timedelta(hours=1)


def _raw(snapshot: MetricsSnapshot) -> dict[str, Any]:
    def plain(buckets: Sequence[tuple[float, float]]) -> list[list[Any]]:
        return [["+Inf" if math.isinf(le) else le, count] for le, count in buckets]  # JSON has no infinity

    return {"prompt": plain(snapshot.prompt_buckets), "output": plain(snapshot.generation_buckets),
            "images": snapshot.image_items, "hits": snapshot.prefix_cache_hits, "queries": snapshot.prefix_cache_queries}


def _buckets(raw: Sequence[Sequence[Any]] | None) -> list[tuple[float, float]]:
    return [(float(le), float(count)) for le, count in raw or []]  # float("+Inf") is infinity


def _total(raw: Mapping[str, Any]) -> float:
    return max((c for _, c in _buckets(raw.get("prompt"))), default=0.0)


def live_mix(snapshot: MetricsSnapshot, marks: Sequence[Mapping[str, Any]],
             now: dt.datetime) -> tuple[TrafficMix | None, list[dict[str, Any]]]:
    """The mix served over the last :data:`WINDOW` (or since the first reading) and the marks to keep.

    A mark is the cumulative histograms and counters of one reading, one an hour; the mix is the reading minus
    the oldest mark inside the window, so it follows what production sends now, not since the server started.
    Each mark also keeps the highest concurrency seen since it was made. A restarted server (fewer requests
    than a mark) counts from zero again.
    """
    concurrency = (snapshot.running or 0.0) + (snapshot.waiting or 0.0)
    current: dict[str, Any] = {**_raw(snapshot), "at": now.isoformat(), "peak": concurrency}
    if not marks:
        return None, [current]  # the first reading: counting starts here (never the sweep that came before)
    restarted = any(_total(m) > _total(current) for m in marks)
    kept = [] if restarted else [dict(m) for m in marks]
    start = now - WINDOW
    inside = [m for m in kept if dt.datetime.fromisoformat(m["at"]) >= start]
    older = [m for m in kept if dt.datetime.fromisoformat(m["at"]) < start]
    kept = [*older[-1:], *inside]
    for mark in kept:
        mark["peak"] = max(float(mark.get("peak") or 0.0), concurrency)
    base: Mapping[str, Any] = kept[0] if kept else {}
    prompt = bucket_delta(_buckets(base.get("prompt")), snapshot.prompt_buckets)
    output = bucket_delta(_buckets(base.get("output")), snapshot.generation_buckets)
    queries = counter_delta(base.get("queries"), snapshot.prefix_cache_queries)
    hits = counter_delta(base.get("hits"), snapshot.prefix_cache_hits)
    peak = max(concurrency, float(base.get("peak") or 0.0))
    mix = mix_from_histograms(prompt, output, image_items=counter_delta(base.get("images"), snapshot.image_items),
                              prefix_hit_rate=hits / queries if queries > 0 else snapshot.prefix_cache_hit_rate,
                              peak_concurrency=peak)
    if not kept or now - dt.datetime.fromisoformat(kept[-1]["at"]) >= MARK_EVERY:
        kept.append(current)
    return mix, kept


def update_live_mix(uow: SqlUnitOfWork, row: Endpoint, snapshot: MetricsSnapshot, ctx: Context) -> TrafficMix | None:
    """Store the endpoint's live mix from one reading (in the caller's transaction); None before any request."""
    stored = uow.capacity.live_mix(row.id)
    marks = (stored.baseline or {}).get("marks", []) if stored is not None else []
    mix, kept = live_mix(snapshot, marks, ctx.clock.now())
    uow.capacity.set_live_mix(row.id, ctx.clock.now(), mix.model_dump(mode="json") if mix else {}, {"marks": kept})
    return mix


def stored_live_mix(uow: SqlUnitOfWork, endpoint_id: int) -> TrafficMix | None:
    row = uow.capacity.live_mix(endpoint_id)
    return TrafficMix.model_validate(row.mix) if row is not None and row.mix else None


def production_mix(uow: SqlUnitOfWork, endpoint: EndpointSettings) -> TrafficMix | None:
    """What the sweep replays: the registered trace, else the live mix (of the partner side for a pair)."""
    names = [endpoint.name, *([endpoint.pair.partner] if endpoint.pair else [])]
    rows = [row for name in names if (row := uow.endpoints.get(name)) is not None]
    for row in rows:
        trace = uow.capacity.trace(row.id)
        if trace is not None:
            return TrafficMix.model_validate(trace.mix)
    for row in rows:
        live = stored_live_mix(uow, row.id)
        if live is not None:
            return live
    return None


def served_context_of(endpoint: EndpointSettings, release: ReleaseManifest | None) -> int:
    """The context length measured: the release's ``--max-model-len`` within the endpoint's ceiling."""
    if release is None:
        return endpoint.max_model_len
    return min(endpoint.max_model_len, served_context(release.serving.args, endpoint.max_model_len))


def workload_for(ctx: Context, endpoint: EndpointSettings, plan: SweepPlan,
                 release: ReleaseManifest | None) -> Workload:
    with ctx.uow() as uow:
        mix = production_mix(uow, endpoint)
    return synthesise(mix, prompt_words=plan.prompt_words, max_tokens=plan.max_tokens,
                      max_model_len=served_context_of(endpoint, release),
                      multimodal=release is not None and served_multimodal(release.serving.args),
                      prod=endpoint.environment == "prod")


def register_trace(ctx: Context, endpoint_name: str, raw: bytes, actor: Identity) -> TrafficMix:
    """Validate and store a redacted trace as the endpoint's production mix (its records are not kept, its hash is)."""
    authorize(ctx, actor, "register", f"endpoint:{endpoint_name}")
    try:
        trace = parse_trace(raw)
    except TraceError as exc:
        raise Refused(f"trace not registered: {exc}") from None
    mix = mix_from_trace(trace)
    now = ctx.clock.now()
    with ctx.uow() as uow:
        row = uow.endpoints.get(endpoint_name)
        if row is None:
            raise NotFound(f"no endpoint named {endpoint_name}; `kimi-ops status` lists them")
        uow.capacity.add_trace(row.id, now, mix.model_dump(mode="json"), trace.sha256, actor.user_id)
        uow.audit.record(at=now, actor=actor.user_id, action="traffic.trace_registered", subject=f"endpoint:{endpoint_name}",
                         details={"sha256": trace.sha256, "requests": mix.requests})
        uow.commit()
    return mix


def record_review(ctx: Context, endpoint: EndpointSettings, *, kind: str, actor: str, release: str | None,
                  deployment_id: int | None, max_model_len: int, workload: Workload, knee: int | None,
                  proposal: dict[str, Any]) -> int | None:
    """Keep what a sweep measured as the endpoint's newest capacity review; its id (None: the endpoint has no row)."""
    now = ctx.clock.now()
    with ctx.uow() as uow:
        row = uow.endpoints.get(endpoint.name)
        if row is None:
            return None
        production = production_mix(uow, endpoint)
        review = uow.capacity.add_review(CapacityReview(
            endpoint_id=row.id, at=now, kind=kind, actor=actor, deployment_id=deployment_id, release=release,
            max_model_len=max_model_len, knee=knee, workload=workload.as_dict(),
            production_mix=production.model_dump(mode="json") if production else None, proposal=proposal))
        uow.audit.record(at=now, actor=actor, action="capacity.reviewed", subject=f"endpoint:{endpoint.name}",
                         details={"review_id": review.id, "kind": kind, "knee": knee, "max_model_len": max_model_len,
                                  "release": release})
        uow.commit()
        return review.id
