"""Availability drills (pure): the kinds the guide asks for, what a drill observes, and how it is judged.

The guide: "Test node loss, pod deletion, model-load failure, reservation expiry, upstream artifact outage,
and a bad model release. Record recovery time." A drill injects one fault into a live endpoint (through the
cluster adapter), observes the endpoint as its alerts do (a readiness completion, the pods and nodes),
lifts the fault once it was seen (a fault that heals by itself, a deleted pod, is left to the controller)
and records:

* **detection**: from injection to the first observation that saw the fault;
* **recovery**: from injection to the first observation after it where the endpoint answered and every pod
  was ready again;
* the **alerts** the endpoint's rules fired meanwhile (incident kinds, paged or not).

A drill passes when the fault was detected, an alert fired and the endpoint recovered within the drill's
time limit. ``reservation-expiry`` is simulated: the reservation watch runs at the reservation's last alert
threshold on a moved clock, in a transaction that is rolled back; it is detected when the watch would have
alerted, and recovered only when a tested replacement (another live endpoint) would take over.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.domain.health import WorkloadHealth, crash_faults, node_faults

POD_DELETION = "pod-deletion"
MODEL_LOAD_FAILURE = "model-load-failure"
ARTIFACT_OUTAGE = "artifact-outage"
RESERVATION_EXPIRY = "reservation-expiry"
BAD_RELEASE = "bad-release"
NODE_LOSS = "node-loss"

# What each kind does, in a person's words (help, the request's answer, the README).
KINDS: dict[str, str] = {
    POD_DELETION: "delete the endpoint's model pods; the controller must bring one back",
    MODEL_LOAD_FAILURE: "re-apply the live manifest with a model path that does not exist; the stored manifest is "
                        "re-applied once the failure is seen",
    ARTIFACT_OUTAGE: "deny the model pods' egress (the weights store is unreachable) and restart them; the denial "
                     "is lifted once the failure is seen",
    RESERVATION_EXPIRY: "run the reservation watch at the reservation's last alert on a moved clock (nothing is "
                        "kept); recovered only if a tested endpoint takes over",
    BAD_RELEASE: "re-apply the live manifest serving under a wrong model name (it loads, then answers wrongly); the "
                 "stored manifest is re-applied once it is seen, as a rollback would",
    NODE_LOSS: "cordon the endpoint's node and evict its pods; the node is uncordoned once the loss is seen",
}
# Faults kimi-ops lifts itself once they are seen (the others heal, or are not faults of the cluster).
LIFTED = frozenset({MODEL_LOAD_FAILURE, ARTIFACT_OUTAGE, BAD_RELEASE, NODE_LOSS})

WAITING, RUNNING, PASSED, FAILED, REJECTED = "waiting", "running", "passed", "failed", "rejected"
ENDED = frozenset({PASSED, FAILED, REJECTED})


@dataclass(frozen=True)
class Observation:
    """One look at the endpoint during a drill: what was wrong (empty: healthy) at ``at``."""

    at: dt.datetime
    faults: tuple[str, ...]

    @property
    def healthy(self) -> bool:
        return not self.faults


def serving_faults(answered: bool, answer_error: str | None, health: WorkloadHealth | None) -> tuple[str, ...]:
    """Why the endpoint is not serving: its completion, its pods and its nodes (the watch's own rules)."""
    found: list[str] = []
    if not answered:
        found.append(f"the endpoint does not answer ({answer_error or 'no answer'})")
    if health is None:
        found.append("its pods and nodes cannot be read")
        return tuple(found)
    if not any(p.ready for p in health.pods):
        found.append("no model pod is ready" if health.pods else "the endpoint has no model pod")
    found.extend(node_faults(health))
    found.extend(f"node {n.name} is cordoned" for n in health.nodes if n.unschedulable)
    found.extend(crash_faults(health, None))
    return tuple(found)


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str
    detected_at: dt.datetime | None
    recovered_at: dt.datetime | None


def judge(started: dt.datetime, observations: Sequence[Observation], alerts: Sequence[str],
          deadline: dt.datetime) -> Verdict:
    """The drill's verdict from what it observed: detected, alerted, recovered before ``deadline``."""
    detected = next((o.at for o in observations if not o.healthy), None)
    recovered = next((o.at for o in observations if detected is not None and o.at > detected and o.healthy), None)
    if detected is None:
        return Verdict(False, "the fault was never seen: nothing would have told anyone", None, None)
    if recovered is None:
        left = "by the time limit" if observations and observations[-1].at >= deadline else "before the drill stopped"
        return Verdict(False, f"detected after {seconds(detected - started)}, not recovered {left}", detected, None)
    if not alerts:
        return Verdict(False, f"recovered after {seconds(recovered - started)}, but no alert fired", detected, recovered)
    return Verdict(True, f"detected after {seconds(detected - started)}, recovered after {seconds(recovered - started)}",
                   detected, recovered)


def seconds(span: dt.timedelta | None) -> str:
    """``95 s``, ``14 min 05 s``; ``-`` for none."""
    if span is None:
        return "-"
    total = max(0, round(span.total_seconds()))
    minutes, secs = divmod(total, 60)
    return f"{total} s" if minutes == 0 else f"{minutes} min {secs:02d} s"


def stale_drills(last_passed: dt.datetime | None, now: dt.datetime, period: dt.timedelta) -> str | None:
    """Why the infrastructure gate warns about drills (None: a drill passed within ``period``)."""
    if last_passed is None:
        return f"no availability drill has passed on this endpoint (one is expected every {period.days} days)"
    if now - last_passed > period:
        return (f"the last availability drill passed {(now - last_passed).days} days ago "
                f"(one is expected every {period.days} days)")
    return None


@dataclass(frozen=True)
class DrillView:
    """A drill as people see it (``/kimi drills``, ``kimi-ops drills -o json``)."""

    id: int
    endpoint: str
    kind: str
    state: str
    requested_by: str
    requested_at: dt.datetime
    accept_user_impact: bool
    decided_by: str | None
    started_at: dt.datetime | None
    detection_seconds: float | None
    recovery_seconds: float | None
    alerts: list[str] = field(default_factory=list)
    passed: bool | None = None
    reason: str | None = None
    on_fallback_seconds: float | None = None  # how long a failover held users on the fallback during the drill

    @property
    def line(self) -> str:
        """``drill #3 pod-deletion on kimi-prod: passed (detected after 15 s, recovered after 2 min 15 s; alerts: readiness)``."""
        head = f"drill #{self.id} {self.kind} on {self.endpoint}: {self.state}"
        if self.state == WAITING:
            return f"{head} (asked by {self.requested_by}; an approver other than them answers `/kimi drill approve {self.id}`)"
        tail = f"; alerts: {', '.join(self.alerts)}" if self.alerts else ("; no alert fired" if self.reason else "")
        if self.on_fallback_seconds is not None:
            tail += f"; users on the fallback for {seconds(dt.timedelta(seconds=self.on_fallback_seconds))}"
        return f"{head} ({self.reason or 'running'}{tail})"
