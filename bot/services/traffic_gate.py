"""The traffic gate: a concurrency sweep, the knee, and request limits proposed below it.

:func:`run_traffic_gate` measures the endpoint with shared and with unique
prompt prefixes and reports the table, the knee and the proposed HyperPod
``maxConcurrentRequests``/``maxQueueSize``. :func:`accept_proposed_limits` is the
approver's one click that stores the proposal in the endpoint's settings, under
``accepted_request_limits`` (which the start-up re-sync from YAML keeps), bound
to the report the approver saw and accepted at most once per report, by an
approver other than the deployment's requester.

Accepted limits do not wait for the next deployment when the measured one is past
its apply: they reach it through the procedure (close, drain, apply, readiness,
reopen; :mod:`bot.services.limits_apply` says how for each place it can stand).
Each re-render becomes that deployment's applied manifest — a new revision kept
in ``manifest_revisions`` beside the ones before it — so a later rollback to this
release restores its own accepted limits with its exact stored manifest.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass
from typing import Any

from bot.config import EndpointSettings, RequestLimits
from bot.domain.checks import Check, GateReport, stopped_report
from bot.domain.events import LimitsAccepted
from bot.domain.limits import (
    LIMITS_ACCEPTED,
    find_acceptance,
    limits_words,
    proposal_open,
    proposed_limits,
    same_limits,
)
from bot.domain.own_requests import OwnLedger
from bot.domain.release import ReleaseManifest
from bot.domain.rollout import RenderedManifest
from bot.domain.states import State
from bot.domain.sweep import (
    LevelStats,
    Objectives,
    Proposal,
    SweepOutcome,
    SweepPlan,
    propose,
)
from bot.logs import logger_for
from bot.services.access import Identity, authorize
from bot.services.context import Context, require
from bot.services.errors import NotConfigured, NotFound, Refused
from bot.services.limits_apply import ApplyRefused, plan_limits, revise_limits, start_limits_restore
from bot.services.traffic_mix import record_review, workload_for
from bot.services.workload_checks import workload_checks, workload_words

log = logger_for(__name__)


def objectives_for(ctx: Context, endpoint: EndpointSettings) -> Objectives:
    """The configured objectives, with the endpoint's TTFT objective when none is set globally."""
    objectives = ctx.settings.traffic_objectives
    if objectives.ttft_p99_ms is None:
        objectives = objectives.model_copy(update={"ttft_p99_ms": float(endpoint.ttft_objective_ms)})
    return objectives


def sweep_plan(ctx: Context, endpoint: EndpointSettings) -> SweepPlan:
    """The configured plan; on prod the unique-prefix run always (the settings refuse a plan without it there)."""
    plan: SweepPlan = ctx.settings.traffic_sweep
    if endpoint.environment == "prod" and "unique" not in plan.prefix_modes:
        plan = plan.model_copy(update={"prefix_modes": (*plan.prefix_modes, "unique")})
    return plan


def run_traffic_gate(ctx: Context, endpoint: EndpointSettings, release: str | None = None, *,
                     manifest: ReleaseManifest | None = None, deployment_id: int | None = None,
                     kind: str = "traffic-gate", actor: str = "kimi-ops", ledger: OwnLedger | None = None,
                     stop: threading.Event | None = None) -> GateReport:
    """Sweep ``endpoint``'s concurrency with production's mix and propose admission limits below the knee.

    ``manifest`` is the release measured (its context length and whether it takes images); each sweep is kept
    as the endpoint's newest capacity review (``kind``: the traffic gate's, or an on-demand one); ``ledger``
    keeps each request sent. A sweep ``stop`` cut short is no review: its report only says it was stopped.
    """
    try:
        loadgen = require(ctx.ports.loadgen, "load generator")
    except NotConfigured as absent:
        return GateReport(gate="traffic", checks=[Check.errored("traffic.sweep", str(absent))])
    plan = sweep_plan(ctx, endpoint)
    objectives = objectives_for(ctx, endpoint)
    workload = workload_for(ctx, endpoint, plan, manifest)
    outcome = loadgen.sweep(endpoint, plan, objectives, ledger=ledger, workload=workload, stop=stop)
    if stop is not None and stop.is_set():
        return stopped_report("traffic", "traffic.sweep")
    if not outcome.levels or all(lv.ok == 0 and lv.rejected == 0 for lv in outcome.levels):
        said = next((lv.first_error for lv in outcome.levels if lv.first_error), None)
        why = f" (every request failed: {said})" if said else ""
        silent = Check.errored("traffic.sweep", f"the endpoint {endpoint.url} did not answer the sweep{why}")
        return GateReport(gate="traffic", checks=[silent],
                          attachments={"sweep": _sweep_attachment(outcome, plan, objectives)})
    proposal = propose(outcome.levels, objectives, ceiling=plan.ceiling)
    current = endpoint.effective_request_limits
    checks = [*_checks(outcome, proposal, current), *workload_checks(endpoint, plan, workload, outcome.levels)]
    attachments: dict[str, Any] = {
        "mix": {"used": workload.as_dict(), "production": workload.mix.model_dump(mode="json") if workload.mix else None,
                "words": workload_words(workload)},
        "sweep": _sweep_attachment(outcome, plan, objectives),
        "knee": {"concurrency": proposal.knee, "prefix": proposal.limiting_prefix, "broken": list(proposal.knee_reasons)},
        "proposal": {
            "max_concurrent_requests": proposal.max_concurrent_requests,
            "max_queue_size": proposal.max_queue_size,
            "overflow_status_code": current.overflow_status_code,
            "reason": proposal.reason,
        },
        "current_limits": current.model_dump(mode="json"),
    }
    # No plot here: users are closed out while the gate runs. The notifier draws it from these numbers after the
    # report is posted (bot/adapters/gate_plots.py).
    attachments["review_id"] = record_review(
        ctx, endpoint, kind=kind, actor=actor, release=release, deployment_id=deployment_id,
        max_model_len=endpoint.max_model_len, workload=workload, knee=proposal.knee,
        proposal=attachments["proposal"])
    summary = proposal.reason
    return GateReport(gate="traffic", checks=checks, summary=summary, attachments=attachments)


def _sweep_attachment(outcome: SweepOutcome, plan: SweepPlan, objectives: Objectives) -> dict[str, Any]:
    return {
        "levels": [lv.as_dict() for lv in outcome.levels],
        "requests": outcome.requests,
        "own_requests": outcome.own.as_dict(),
        "elapsed_seconds": round(outcome.elapsed_seconds, 2),
        "stopped_early": outcome.stopped_early,
        "plan": plan.model_dump(mode="json"),
        "objectives": objectives.model_dump(mode="json"),
    }


def _hit_rate(levels: list[LevelStats], mode: str) -> str:
    rates = [lv.prefix_cache_hit_rate for lv in levels if lv.prefix == mode and lv.prefix_cache_hit_rate is not None]
    return "n/a" if not rates else f"{max(rates):.0%}"


def _checks(outcome: SweepOutcome, proposal: Proposal, current: RequestLimits) -> list[Check]:
    checks: list[Check] = []
    rejected = sum(lv.rejected for lv in outcome.levels)
    sweep_text = (f"{len(outcome.levels)} levels, {outcome.requests} requests ({rejected} rejected) "
                  f"in {outcome.elapsed_seconds:.0f} s")
    if outcome.stopped_early and proposal.knee is None:
        checks.append(Check.warned("traffic.sweep",
                                   f"{sweep_text}; stopped early ({outcome.stopped_early}) before any objective broke"))
    else:
        checks.append(Check.passed("traffic.sweep", sweep_text, stopped_early=outcome.stopped_early))
    if proposal.max_concurrent_requests is None:
        checks.append(Check.failed("traffic.knee", proposal.reason))
    elif proposal.reached_ceiling:
        checks.append(Check.warned("traffic.knee", proposal.reason))
    else:
        checks.append(Check.passed("traffic.knee", proposal.reason, knee=proposal.knee, broken=list(proposal.knee_reasons)))
    modes = sorted({lv.prefix for lv in outcome.levels})
    knees = {m: min((lv.concurrency for lv in outcome.levels if lv.prefix == m and lv.broken), default=None) for m in modes}
    checks.append(Check.passed(
        "traffic.prefix_cache",
        "; ".join(f"{m} prefixes: hit rate {_hit_rate(outcome.levels, m)}, knee {knees[m] or 'none'}" for m in modes),
        knees=knees,
    ))
    if proposal.max_concurrent_requests is not None and current.max_concurrent_requests > proposal.max_concurrent_requests:
        checks.append(Check.warned(
            "traffic.limits",
            f"the endpoint admits {current.max_concurrent_requests} concurrent requests, above the measured safe "
            f"{proposal.max_concurrent_requests}; accept the proposal to lower it",
        ))
    elif proposal.max_concurrent_requests is not None:
        text = (f"configured {current.max_concurrent_requests} concurrent / queue {current.max_queue_size}; "
                f"proposed {proposal.max_concurrent_requests} / {proposal.max_queue_size}")
        admission = current.max_concurrent_requests + current.max_queue_size
        if (proposal.knee is not None and proposal.knee > admission
                and all(r.startswith("429/503") for r in proposal.knee_reasons)):
            # The endpoint's own admission limit answered 429: the model itself was never pushed past it.
            text += "; the knee is the endpoint's own admission limit, raise it and recheck to measure the model beyond it"
        checks.append(Check.passed("traffic.limits", text))
    return checks


@dataclass(frozen=True)
class AcceptedLimits:
    endpoint: str
    deployment_id: int
    previous: dict[str, Any]
    accepted: dict[str, Any]
    accepted_at: dt.datetime
    # Set when the limits were applied to the running release: its new manifest's hash and revision number.
    applied_sha256: str | None = None
    revision: int | None = None
    # Set when a restore of the live release applies them (close, drain, apply, readiness, reopen): its number.
    restore_id: int | None = None
    how: str = ""  # how they reach the cluster, in words (bot/services/limits_apply.py)
    # The deployment whose engine run carries them onto the cluster (the restore, or the ramping deployment): the
    # accepting command drives it at once.
    drive: int | None = None
    ramping: bool = False  # stored as a revision the ramp applies behind a closed route (not applied yet)


def accept_proposed_limits(
    ctx: Context,
    endpoint_name: str | None,
    deployment_id: int,
    actor: Identity,
    *,
    seen_report_hash: str | None = None,
) -> AcceptedLimits:
    """Store the latest traffic-gate proposal of ``deployment_id`` as its endpoint's request limits.

    ``endpoint_name`` ``None`` means the deployment's own endpoint. ``seen_report_hash`` binds a click to the
    exact report the approver read: a re-checked report, a proposal already accepted, one the endpoint already
    runs with, one whose release ended or was replaced, or an acceptance by the deployment's own requester is
    refused (and the refusal audited), changing nothing. When the deployment is past its apply, the limits are
    applied to it at once (a new manifest revision); if the cluster refuses, nothing is accepted.
    The change reaches the gate message through the outbox (``limits.accepted``).
    """
    authorize(ctx, actor, "accept_limits", f"endpoint:{endpoint_name}" if endpoint_name else f"deployment:{deployment_id}")
    now = ctx.clock.now()
    with ctx.uow() as uow:

        def refuse(message: str, why: str) -> Refused:
            uow.rollback()
            uow.audit.record(at=now, actor=actor.user_id, action="endpoint.limits_refused", subject=f"deployment:{deployment_id}",
                             details={"why": why, "seen_report_hash": seen_report_hash})
            uow.commit()
            return Refused(message)

        # Locked first (the engine's order: the deployment, then its endpoint): how the limits reach the cluster
        # depends on its state, which the engine may be moving on (a ramp going live) until this transaction ends.
        dep = uow.deployments.get_for_update(deployment_id)
        if dep is None:
            raise NotFound(f"no deployment #{deployment_id}; `/kimi history` lists them")
        name = dep.endpoint.name
        if endpoint_name is not None and name != endpoint_name:
            raise Refused(f"deployment #{deployment_id} runs on {name}, not {endpoint_name}; name the right endpoint")
        # The endpoint row is locked too, so two clicks at once are decided one after the other.
        endpoint = uow.endpoints.get_for_update(name)
        if endpoint is None:
            raise NotFound(f"no endpoint named {name}")
        if actor.user_id == dep.requested_by:
            raise refuse(f"you requested deployment #{deployment_id}; another approver must accept the limits its traffic "
                         "gate proposed", "requester")
        row = uow.gates.latest(deployment_id, "traffic")
        if row is None:
            raise Refused(f"deployment #{deployment_id} has no traffic gate report yet; wait for the sweep to finish")
        if seen_report_hash is not None and seen_report_hash != row.report_hash:
            raise refuse(f"the traffic report of deployment #{deployment_id} changed since you looked (it was re-checked); "
                         "accept the proposal of the newest report in the thread", "stale")
        done = find_acceptance(uow.audit.actions(f"endpoint:{name}", LIMITS_ACCEPTED), deployment_id, row.report_hash)
        if done is not None:
            raise refuse(f"these limits were already accepted by {done.accepted_by} at {done.accepted_at:%Y-%m-%d %H:%M} UTC "
                         f"({limits_words(done.accepted)}); nothing changed", "already_accepted")
        if not proposal_open(dep.state):
            raise refuse(f"deployment #{deployment_id} is {State(dep.state).words}: its sweep measured a release that is "
                         f"not serving on {name}, so its proposal no longer applies", dep.state)
        proposal = proposed_limits(row.report)
        if proposal is None:
            raise Refused(f"the traffic gate of deployment #{deployment_id} proposed no limit "
                          "(no level met the objectives); nothing to accept")
        current = EndpointSettings.model_validate(endpoint.settings)
        previous = current.effective_request_limits
        if same_limits(proposal, previous.model_dump(mode="json")):
            raise refuse(f"{name} already runs with {limits_words(proposal)}; nothing to accept", "unchanged")
        accepted = RequestLimits(
            max_concurrent_requests=int(proposal["max_concurrent_requests"]),
            max_queue_size=int(proposal.get("max_queue_size") or 0),
            overflow_status_code=previous.overflow_status_code,
        )
        # A new dict, so the JSON column sees the change.
        settings = {**endpoint.settings, "accepted_request_limits": accepted.model_dump(mode="json")}
        stored: tuple[RenderedManifest, int] | None = None
        restore_id: int | None = None
        revised = EndpointSettings.model_validate(settings)
        plan = plan_limits(dep, endpoint, revised)
        if plan.how in ("apply", "ramp"):
            try:  # ramping: stored now, applied by the ramp behind a closed route (bot/services/limits_apply.py)
                stored = revise_limits(ctx, uow, dep, revised, actor=actor.user_id, now=now, apply=plan.how == "apply")
            except ApplyRefused as exc:
                raise refuse(str(exc), exc.why) from None
        elif plan.how == "restore":
            try:
                restore_id = start_limits_restore(ctx, uow, dep, endpoint, revised, actor.user_id).id
            except Exception as exc:
                raise refuse(f"the restore that applies these limits could not start ({exc}); nothing changed",
                             "restore_failed") from None
        endpoint.settings = settings
        applied = stored if plan.how == "apply" else None  # on the cluster now
        before, after = previous.model_dump(mode="json"), accepted.model_dump(mode="json")
        details = {"deployment_id": deployment_id, "gate_result_id": row.id, "report_hash": row.report_hash,
                   "previous": before, "accepted": after,
                   "applied_sha256": applied[0].sha256 if applied else None, "revision": stored[1] if stored else None,
                   "procedure": plan.how, "restore_id": restore_id}
        uow.audit.record(at=now, actor=actor.user_id, action=LIMITS_ACCEPTED, subject=f"endpoint:{name}", details=details)
        uow.events.emit(LimitsAccepted(deployment_id=deployment_id, endpoint_name=name, gate_result_id=row.id,
                                       report_hash=row.report_hash, previous=before, accepted=after,
                                       accepted_by=actor.user_id, accepted_at=now), at=now)
        uow.commit()
    return AcceptedLimits(endpoint=name, deployment_id=deployment_id, previous=previous.model_dump(mode="json"),
                          accepted=accepted.model_dump(mode="json"), accepted_at=now,
                          applied_sha256=applied[0].sha256 if applied else None, revision=stored[1] if stored else None,
                          restore_id=restore_id, how=plan.why, ramping=plan.how == "ramp",
                          drive=restore_id if restore_id is not None else deployment_id if plan.how == "ramp" else None)
