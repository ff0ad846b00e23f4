"""Each gate's automated checks, producing the :class:`GateReport` a human then decides on.

An adapter that cannot answer (AWS down, cluster unreachable) yields an ``error``
check, never a ``pass``: a report with an error cannot be approved.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.config import EndpointSettings
from bot.domain.capture import capture_check
from bot.domain.checks import Check, GateReport
from bot.domain.doors import CHECK as DOORS_CHECK
from bot.domain.doors import SIDE_DOOR_EXCEPTION, door_check
from bot.domain.egress import pod_boundary_check
from bot.domain.infrastructure import reservation_checks
from bot.domain.own_requests import OwnLedger
from bot.domain.release import ReleaseManifest
from bot.logs import logger_for
from bot.services.admission import UNGUARDED
from bot.services.artifact_gate import run_artifact_checks
from bot.services.capacity import context_review_check
from bot.services.context import Context, require
from bot.services.drills import drill_check_reason
from bot.services.errors import NotConfigured
from bot.services.governance import artifact_policy
from bot.services.model_gate import run_model_gate, with_release_report
from bot.services.reservations import reservation_for
from bot.services.traffic_gate import run_traffic_gate

log = logger_for(__name__)


@dataclass(frozen=True)
class GateSubject:
    """What a gate looks at: the deployment's release and endpoint."""

    deployment_id: int
    kind: str
    endpoint: EndpointSettings
    release: ReleaseManifest
    release_hash: str
    manifest_hash: str | None
    baseline_reports: dict[str, Any]
    requester: str | None = None


def guarded(name: str, fn: Callable[[], list[Check]]) -> list[Check]:
    """Run an adapter-backed check; any failure to ask becomes an ``error`` check."""
    try:
        return fn()
    except Exception as exc:  # the check could not be made: never a pass
        log.warning("check %s could not run: %s", name, exc, exc_info=True)
        return [Check.errored(name, f"could not be checked: {_short(exc)}")]


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]


def artifact_report(ctx: Context, subject: GateSubject) -> GateReport:
    try:
        verifier = require(ctx.ports.artifacts, "S3/ECR access")
    except NotConfigured as absent:
        return GateReport(gate="artifact", checks=[Check.errored("artifact.aws", str(absent))])
    if subject.kind == "rollback":
        checks = guarded("weights", lambda: verifier.verify_weights(subject.release))
        checks.append(
            Check.passed("manifest.restore",
                         f"restores the exact manifest applied before (sha256 {str(subject.manifest_hash)[:12]})")
            if subject.manifest_hash
            else Check.failed("manifest.restore", "no stored manifest for the target release; it cannot be restored exactly")
        )
        return GateReport(gate="artifact", checks=checks, summary=f"rollback to {subject.release.name}: weights re-verified")
    return run_artifact_checks(verifier, subject.release, artifact_policy(ctx, subject.endpoint, subject.requester))


def infrastructure_report(ctx: Context, subject: GateSubject, now: dt.datetime) -> GateReport:
    endpoint = subject.endpoint
    checks: list[Check] = []
    try:
        cluster = require(ctx.ports.cluster, "cluster access")
        preflight = guarded("cluster.preflight", lambda: cluster.preflight(endpoint))
    except NotConfigured as absent:
        preflight = [Check.errored("cluster.preflight", str(absent))]
    zones = sorted({z for c in preflight for z in c.details.get("zones", [])})
    try:
        require(ctx.ports.reservations, "AWS access", "to read reservations")
    except NotConfigured as absent:
        checks.append(Check.errored("reservation", str(absent)))
    else:
        checks.extend(guarded("reservation", lambda: reservation_checks(
            reservation_for(ctx, endpoint, fresh=True),
            endpoint_kind=endpoint.kind,
            instance_type=endpoint.instance_type,
            availability_zone=endpoint.availability_zone,
            node_zones=zones,
            now=now,
            warmup=dt.timedelta(minutes=endpoint.warmup_minutes),
            soak=dt.timedelta(minutes=endpoint.soak_minutes),
            rollout_window=dt.timedelta(minutes=endpoint.rollout_window_minutes),
        )))
    checks.extend(preflight)
    checks.append(pod_boundary_check(list(subject.release.serving.env), endpoint.kind, endpoint.environment,
                                     endpoint.egress))
    checks.extend(guarded("capture.policy", lambda: [capture_check(
        endpoint.data_capture, endpoint.kind, ctx.settings.capture_max_sampling_percent,
        artifact_policy(ctx, endpoint, subject.requester),
    )]))
    checks.extend(guarded("drills.recent", lambda: [_drills_check(ctx, endpoint)]))
    checks.extend(guarded(DOORS_CHECK, lambda: [_doors_check(ctx, subject)]))
    checks.extend(guarded("capacity.context", lambda: [context_review_check(ctx, endpoint)]))
    return GateReport(gate="infrastructure", checks=checks)


def _doors_check(ctx: Context, subject: GateSubject) -> Check:
    """``cluster.doors``: the route is the one way to the model pods once this release is applied (prod: or it fails)."""
    try:
        cluster = require(ctx.ports.cluster, "cluster access")
    except NotConfigured as absent:
        return Check.errored(DOORS_CHECK, str(absent))
    manifest = cluster.render(subject.release, subject.endpoint, subject.release_hash)
    paths = cluster.doors(subject.endpoint, manifest)
    policy = artifact_policy(ctx, subject.endpoint, subject.requester)
    return door_check(paths, environment=subject.endpoint.environment,
                      exception=policy.exception(SIDE_DOOR_EXCEPTION, subject.release.name))


def _drills_check(ctx: Context, endpoint: EndpointSettings) -> Check:
    """A warning (never blocking) when no availability drill passed on the endpoint within ``drill_period_days``."""
    stale = drill_check_reason(ctx, endpoint.name)
    if stale is not None:
        return Check.warned("drills.recent", f"{stale}; `/kimi drill {endpoint.name} KIND` runs one")
    return Check.passed("drills.recent", f"an availability drill passed within {ctx.settings.drill_period_days} days")


def _human_decides(gate: str, check: str, what: str) -> GateReport:
    """The report of a gate whose automated checks this process cannot run: it says so plainly."""
    return GateReport(
        gate=gate,
        checks=[Check.warned(check, f"no automated {what} ran for this gate: {HUMAN_STEP[gate]}")],
        summary=f"no automated {gate} checks ran; a human decides",
    )


HUMAN_STEP = {
    "model": "review the endpoint by hand and decide",
    "traffic": "send a small internal cohort and decide",
}


def model_report(ctx: Context, subject: GateSubject, ledger: OwnLedger | None = None,
                 stop: threading.Event | None = None) -> GateReport:
    if ctx.ports.evaluator is None:
        return _human_decides("model", "model.evaluation", "evaluation")
    report = run_model_gate(ctx, subject.endpoint, subject.release.name, subject.baseline_reports.get("model"),
                            ledger=ledger, stop=stop)
    return with_release_report(ctx, report, subject.release.evaluation_report)


def traffic_report(ctx: Context, subject: GateSubject, ledger: OwnLedger | None = None,
                   stop: threading.Event | None = None) -> GateReport:
    if ctx.ports.loadgen is None:
        return _human_decides("traffic", "traffic.sweep", "load sweep")
    return run_traffic_gate(ctx, subject.endpoint, subject.release.name, manifest=subject.release,
                            deployment_id=subject.deployment_id, ledger=ledger, stop=stop)


def run_gate(ctx: Context, gate: str, subject: GateSubject, ledger: OwnLedger | None = None,
             stop: threading.Event | None = None) -> GateReport:
    """Run one gate's checks, and say on each gate when nothing keeps users off the candidate.

    ``ledger`` keeps the requests the model and traffic gates send to the candidate, each before it is sent;
    once ``stop`` is set, their evaluation or sweep sends nothing more and ends (its report is not to be stored).
    """
    report = _run_gate(ctx, gate, subject, ledger, stop)
    endpoint = subject.endpoint
    if endpoint.route is not None or endpoint.door.application_layer is not None:
        return report
    unguarded = Check.warned("door.none", f"{UNGUARDED}: {endpoint.name} has no route and no application layer, so "
                                          "users reach whatever runs, gates or not; add a route: block")
    return report.model_copy(update={"checks": [*report.checks, unguarded]})


def _run_gate(ctx: Context, gate: str, subject: GateSubject, ledger: OwnLedger | None,
              stop: threading.Event | None) -> GateReport:
    """Run one gate's checks; an unexpected failure becomes an ``error`` report, never a crash."""
    try:
        if gate == "artifact":
            return artifact_report(ctx, subject)
        if gate == "infrastructure":
            return infrastructure_report(ctx, subject, ctx.clock.now())
        if gate == "model":
            return model_report(ctx, subject, ledger, stop)
        if gate == "traffic":
            return traffic_report(ctx, subject, ledger, stop)
    except Exception as exc:
        log.exception("gate %s checks crashed", gate)
        return GateReport(gate=gate, checks=[Check.errored(f"{gate}.checks", f"the checks could not run: {_short(exc)}")])
    raise ValueError(f"unknown gate {gate}")
