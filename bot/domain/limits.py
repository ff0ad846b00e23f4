"""Request-limit proposals of the traffic gate and their acceptance (pure policy).

A traffic report may propose HyperPod ``maxConcurrentRequests``/``maxQueueSize``
below the measured knee; an approver accepts that proposal once into the
endpoint's settings. The rules deciding whether a proposal may still be
accepted, and which audit row records an acceptance, live here so the service
that stores an acceptance and the notifier that shows it decide alike.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.domain.checks import GateReport
from bot.domain.states import TERMINAL, State

# A proposal measured a release; once that deployment ended without going live, or another release replaced
# it, the proposal no longer describes what serves, so it is neither offered nor accepted.
LIMITS_CLOSED_STATES: frozenset[State] = TERMINAL - {State.LIVE}
LIMITS_ACCEPTED = "endpoint.limits_accepted"
"""The audit action of an acceptance (subject ``endpoint:NAME``)."""

AuditEntry = tuple[str, str, dt.datetime, Mapping[str, Any]]
"""An audit row as ``(action, actor, at, details)``."""


@dataclass(frozen=True)
class LimitsAcceptance:
    """Who accepted a traffic report's proposal into the endpoint's settings, and when."""

    accepted_by: str
    accepted_at: dt.datetime
    accepted: dict[str, Any]
    previous: dict[str, Any]
    # The hash of the manifest that put them on the running release (None: stored for the next render only).
    applied_sha256: str | None = None


def proposal_open(state: str) -> bool:
    """Whether a deployment in ``state`` may still have its (newest) traffic proposal accepted."""
    return state not in LIMITS_CLOSED_STATES


def proposed_limits(report: Mapping[str, Any] | GateReport) -> dict[str, Any] | None:
    """The traffic report's proposal, or ``None`` when it proposed nothing."""
    attachments = (report.attachments if isinstance(report, GateReport) else report.get("attachments")) or {}
    proposal: dict[str, Any] = attachments.get("proposal") or {}
    return proposal if proposal.get("max_concurrent_requests") else None


def limits_words(limits: Mapping[str, Any]) -> str:
    """``maxConcurrentRequests N, maxQueueSize M``: the manifest's own names, as refusals and notes say them."""
    return f"maxConcurrentRequests {limits.get('max_concurrent_requests')}, maxQueueSize {limits.get('max_queue_size') or 0}"


def same_limits(proposal: Mapping[str, Any], effective: Mapping[str, Any]) -> bool:
    return (int(proposal["max_concurrent_requests"]) == int(effective["max_concurrent_requests"])
            and int(proposal.get("max_queue_size") or 0) == int(effective.get("max_queue_size") or 0))


def find_acceptance(entries: Sequence[AuditEntry], deployment_id: int, report_hash: str) -> LimitsAcceptance | None:
    """The acceptance of exactly this report among audit entries ``(action, actor, at, details)``."""
    for action, actor, at, details in entries:
        if (action == LIMITS_ACCEPTED and details.get("report_hash") == report_hash
                and details.get("deployment_id") == deployment_id):
            return LimitsAcceptance(actor, at, dict(details.get("accepted") or {}), dict(details.get("previous") or {}),
                                    details.get("applied_sha256"))
    return None


def limits_above(proposal: Mapping[str, Any] | None, limits: Mapping[str, Any]) -> str | None:
    """How ``limits`` (what would go live) exceed the concurrency the traffic report measured safe, or None.

    Only the concurrency is a measured safety bound (the knee); the proposed queue follows from latency and
    moves with every sweep, so a queue bound above it is not "above the measured safe level". No proposal
    (nothing was measured safe) is the gate's own failed check, not this rule's.
    """
    if proposal is None:
        return None
    safe = int(proposal["max_concurrent_requests"])
    admitted = int(limits.get("max_concurrent_requests") or 0)
    if admitted <= safe:
        return None
    return f"{admitted} concurrent requests admitted, above the measured safe {safe} (proposed {limits_words(proposal)})"


def approval_above_limits(report: GateReport, effective: Mapping[str, Any]) -> str | None:
    """What approving ``report``'s gate as it stands would go live with, when that is above its measured safe limits.

    Only a traffic gate measures limits; a plain approval is refused while this is not ``None`` (the decision
    service applies the same rule), so the gate message offers only the approvals that can succeed.
    """
    return limits_above(proposed_limits(report), effective) if report.gate == "traffic" else None
