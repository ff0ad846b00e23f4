"""What each message the notifier sends says, read from the stored rows it reports on.

The notifier (:mod:`bot.adapters.slack.notifier`) decides when a message is
posted or edited; this module decides what it reads like at that moment: a
thread's root, its progress message, a gate message (buttons while undecided,
who decided, the traffic limits part), a gate message a re-check replaced, an
incident alert. It turns store rows into the chat-neutral parts of
:mod:`bot.views` (which read the domain only) and renders no Block Kit itself.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from bot.adapters.slack.blocks import slack_text
from bot.adapters.store.models import Deployment, GateResult, Incident
from bot.adapters.store.outbox import event_of
from bot.adapters.store.uow import SqlUnitOfWork
from bot.config import EndpointSettings
from bot.domain.chat_text import stored_reason
from bot.domain.checks import GateReport
from bot.domain.events import RolloutProgress, StateChanged
from bot.domain.limits import (
    LIMITS_ACCEPTED,
    LimitsAcceptance,
    approval_above_limits,
    find_acceptance,
    proposal_open,
)
from bot.domain.states import State, work_kind
from bot.views.actions import GateTicket
from bot.views.deployments import PODS, deployment_title, progress_text
from bot.views.gates import decided_note, gate_parts, limits_parts, waiting_for
from bot.views.incidents import alert_parts
from bot.views.parts import Note, Part, Text, person

# What a plot is called in the thread, per gate, after the endpoint and release (a file saved from Slack says whose).
PLOT_NAMES = {"traffic": "traffic-sweep.png", "model": "model-pass-rates.png"}
PLOT_TITLES = {"traffic": "latency and 429/error rate against concurrency, knee marked",
               "model": "pass rate per kind, this release beside production"}


def plot_filename(endpoint: str, release: str, gate: str) -> str:
    """``kimi-prod-kimi-k3-2026-09-01-traffic-sweep.png``: the endpoint, the release, then what the plot shows."""
    return f"{endpoint}-{release}-{PLOT_NAMES.get(gate, f'{gate}-plot.png')}"


def gate_plot_title(gate: str, deployment_id: int) -> str:
    return f"{gate.capitalize()} gate · deployment #{deployment_id}: {PLOT_TITLES.get(gate, 'plot')}"


def gate_plot_alt_text(gate: str, deployment_id: int) -> str:
    return f"{gate} gate plot of deployment #{deployment_id}: {PLOT_TITLES.get(gate, 'plot')}"


def deployment_actors(uow: SqlUnitOfWork, dep: Deployment) -> frozenset[str]:
    """Who acted on ``dep`` (its audit rows' actors, who asked): the only ids its stored reasons mention."""
    return uow.audit.actors([dep.id])[dep.id] | {dep.requested_by}


def root_text(dep: Deployment, state: str | None = None, reason: str | None = None, *,
              actors: frozenset[str]) -> str:
    """A thread's root: its title, who asked, why it is where it is (``actors``: who acted on it)."""
    # The title follows the event being delivered, not the database (which may already be further on).
    state, reason = (state, reason) if state else (dep.state, dep.state_reason)
    return slack_text(deployment_title(dep.id, work_kind(dep.kind, dep.cause_id), dep.release.name, dep.endpoint.name, state)
                      + f"\nrequested by {person(dep.requested_by)}"
                      + (f"\n_{stored_reason(reason, actors)}_" if reason else ""))


def pods_line(uow: SqlUnitOfWork, dep: Deployment) -> str | None:
    """The newest thing the rollout watch said about ready pods or replicas, if it said any."""
    for event in reversed(list(uow.events.for_deployment(dep.id))):
        if event.kind == RolloutProgress.KIND:
            message = str((event.payload or {}).get("message") or "")
            if PODS.search(message):
                return message
    return None


@dataclass(frozen=True)
class ThreadStep:
    """Where a deployment's thread stands: the newest step delivered to it, when it began, why, and the steps so far."""

    state: State
    since: dt.datetime
    reason: str | None
    steps: tuple[State, ...]


def thread_step(uow: SqlUnitOfWork, dep: Deployment) -> ThreadStep:
    """The step the thread has been told of: the newest *delivered* state change, never the database's state.

    The database may already be further on (its events not delivered yet), and a rollout line may name an older
    step; reading the delivered changes keeps the progress message and the root from going back or running ahead.
    An ending, once delivered, stays (``live`` then ``superseded`` are both endings; the later one is shown).
    """
    moves: list[tuple[State, dt.datetime, str | None]] = []
    for row in uow.events.for_deployment(dep.id):
        if row.kind == StateChanged.KIND and row.delivered_at is not None:
            event = event_of(row)
            if isinstance(event, StateChanged):
                moves.append((State(event.to_state), row.at, event.reason))
    endings = [m for m in moves if m[0].terminal]
    state, since, reason = endings[-1] if endings else moves[-1] if moves else (State.REQUESTED, dep.created_at, None)
    trail = [m[0] for m in moves if not m[0].terminal] + [m[0] for m in endings]
    steps = tuple(s for i, s in enumerate(trail) if i == 0 or trail[i - 1] != s)
    return ThreadStep(state, since, reason, steps)


def progress_parts(uow: SqlUnitOfWork, dep: Deployment, step: ThreadStep, last: str | None) -> list[Part]:
    """The deployment's one progress message at ``step``: pods while running, the steps so far, the last event."""
    pods = pods_line(uow, dep) if not step.state.terminal else None
    return [Text(slack_text(progress_text(step.state, requested_at=dep.created_at, step_since=step.since,
                                          steps=step.steps, pods=pods, last=last)))]


def _acceptance(uow: SqlUnitOfWork, dep: Deployment, row: GateResult) -> LimitsAcceptance | None:
    return find_acceptance(uow.audit.actions(f"endpoint:{dep.endpoint.name}", LIMITS_ACCEPTED), dep.id, row.report_hash)


def traffic_limits_parts(uow: SqlUnitOfWork, dep: Deployment, row: GateResult, report: GateReport) -> tuple[Part, ...]:
    """The accept-limits part of a traffic gate message, as things stand in the database now."""
    latest = uow.gates.latest(dep.id, "traffic")
    open_ = latest is not None and latest.id == row.id and proposal_open(dep.state)
    effective = EndpointSettings.model_validate(dep.endpoint.settings).effective_request_limits.model_dump(mode="json")
    ticket = GateTicket(dep.id, row.gate, row.report_hash, dep.release.tuple_hash) if open_ else None
    undecided = row.decision is None and not State(dep.state).terminal
    return limits_parts(report, effective=effective, acceptance=_acceptance(uow, dep, row), ticket=ticket,
                        undecided=undecided)


def limits_settled(report: GateReport, acceptance: LimitsAcceptance) -> GateReport:
    """``report`` as shown once its proposal was accepted: its limits warning no longer asks for the acceptance."""
    checks = [check.model_copy(update={"reason": f"{check.reason.split('; accept the proposal')[0]}; accepted since by "
                                                 f"{acceptance.accepted_by}"})
              if check.name == "traffic.limits" and check.status == "warn" else check for check in report.checks]
    return report.model_copy(update={"checks": checks})


def gate_message(uow: SqlUnitOfWork, dep: Deployment, row: GateResult) -> list[Part]:
    """A gate message as it should read now: buttons while undecided (only those that can succeed), who decided,
    the limits part."""
    report = GateReport.model_validate(row.report)
    acceptance = _acceptance(uow, dep, row) if row.gate == "traffic" else None
    if acceptance is not None:
        report = limits_settled(report, acceptance)
    waiting = row.decision is None and not State(dep.state).terminal
    ticket = GateTicket(dep.id, row.gate, row.report_hash, dep.release.tuple_hash) if waiting else None
    endpoint = EndpointSettings.model_validate(dep.endpoint.settings)
    effective = endpoint.effective_request_limits.model_dump(mode="json")
    above = approval_above_limits(report, effective) if waiting else None
    actors = deployment_actors(uow, dep) | ({acceptance.accepted_by} if acceptance is not None else set())
    parts = list(gate_parts(report, deployment_id=dep.id, release=dep.release.name, endpoint=dep.endpoint.name,
                            actors=actors, kind=work_kind(dep.kind, dep.cause_id), ticket=ticket, above_limits=above))
    if waiting:
        parts.insert(1, Text(waiting_for(endpoint, dep.requested_by)))
    elif row.decision and row.decided_by and row.decided_at:
        override = ((row.seen or {}).get("limits_override") or {}).get("reason")
        why = row.decision_reason or (f"above the measured limits: {override}" if override else None)
        parts.append(decided_note(row.decision, row.decided_by, row.decided_at, why))
    if row.gate == "traffic":
        parts += traffic_limits_parts(uow, dep, row, report)
    return parts


def replaced_gate_message(uow: SqlUnitOfWork, dep: Deployment, older: GateResult, newer: GateResult) -> list[Part]:
    """A gate message a re-check replaced: the old report, no buttons, where the new one is."""
    old_report = GateReport.model_validate(older.report)
    stale = [*gate_parts(old_report, deployment_id=dep.id, release=dep.release.name, endpoint=dep.endpoint.name,
                         actors=deployment_actors(uow, dep), kind=work_kind(dep.kind, dep.cause_id)),
             Note(f"Re-checked at {newer.checked_at:%Y-%m-%d %H:%M} UTC: the new report is further down the thread.")]
    if older.gate == "traffic":
        stale += traffic_limits_parts(uow, dep, older, old_report)  # no button now; who accepted it, if anyone did
    return stale


def limits_accepted_text(accepted_by: str, accepted: dict[str, Any]) -> str:
    """Said in the thread when the gate message it belongs to was never posted."""
    return (f"Limits accepted by {person(accepted_by)}: maxConcurrentRequests "
            f"{accepted.get('max_concurrent_requests')}, maxQueueSize {accepted.get('max_queue_size')}")


def incident_parts(incident: Incident, text: str, context: dict[str, Any]) -> list[Part]:
    """A metrics-watch alert as it reads now: who took it, a silence, recovered (no buttons then)."""
    return alert_parts(text, incident.id, context, acknowledged_by=incident.acknowledged_by,
                       silenced_by=incident.silenced_by, silenced_until=incident.silenced_until,
                       silence_reason=incident.silence_reason, closed=not incident.open)
