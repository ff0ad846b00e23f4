"""Outbox events: every event class goes into an ``events`` row and comes back equal, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from bot.adapters.store.outbox import UnknownEvent, event_of, from_row, to_row
from bot.domain.events import (
    BY_KIND,
    EVENT_CLASSES,
    AdmissionChanged,
    AdmissionStuck,
    DeploymentRequested,
    DrainStalled,
    DrillNotice,
    FailoverNotice,
    GateDecided,
    GatePlot,
    GateReminder,
    GateWaiting,
    IncidentHandled,
    LimitsAccepted,
    OutboxEvent,
    RampPlot,
    RampSplit,
    ReadinessAlert,
    ReadinessRecovered,
    ReservationAlert,
    ReservationAppeared,
    ReservationChanged,
    ReservationEscalation,
    ReservationFound,
    ReservationGone,
    ReservationMismatch,
    ReservationMissing,
    ReservationWatchFailed,
    ReservationWatchRecovered,
    RestoreStarted,
    RolloutProgress,
    RulesNotApplied,
    ServiceRolledBack,
    SloPlot,
    StateChanged,
    WatchAlert,
    WatchRecovered,
)
from bot.services.deployments import request_deploy
from tests.conftest import START
from tests.workflow_support import REQUESTER, workflow

AT = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC)
LIMITS = {"max_concurrent_requests": 64, "max_queue_size": 16, "overflow_status_code": 429}


def samples(deployment_id: int) -> list[OutboxEvent]:
    """One event of every class, every field set to something other than its default."""
    common = {"deployment_id": deployment_id, "endpoint_name": "kimi-prod"}
    endpoint = {"endpoint_name": "kimi-prod", "channel": "C0PROD"}
    reservation = {**endpoint, "reservation_id": "cr-0001", "details": {"threshold_hours": 24.0, "end": AT.isoformat()}}
    incident = {**endpoint, "region": "us-east-1", "incident": "reservation-watch"}
    return [
        DeploymentRequested(**common, release="rel-a", kind="deploy", replaces=3),
        StateChanged(**common, from_state="rolling_out", to_state="readiness", reason="rolled out", release="rel-a",
                     kind="deploy", details={"rollout_seconds": 12.5, "changed": True}),
        GateWaiting(**common, gate="traffic", gate_result_id=7, report={"gate": "traffic", "checks": []}, report_hash="a" * 64,
                    release="rel-a", release_hash="b" * 64, requested_by="U0DEPLOYER", kind="deploy"),
        GateDecided(**common, gate="model", decision="rejected", reason="too slow", gate_result_id=8, report_hash="c" * 64,
                    release_hash="d" * 64, release="rel-a", status="warn", decided_by="U0APPROVER1", decided_at=AT,
                    slack_channel="C0PROD", slack_ts="1700000000.000100"),
        LimitsAccepted(**common, gate_result_id=9, report_hash="e" * 64, previous=LIMITS,
                       accepted={**LIMITS, "max_concurrent_requests": 48}, accepted_by="U0APPROVER1", accepted_at=AT),
        GatePlot(**common, gate="traffic", gate_result_id=9),
        RolloutProgress(**common, message="2/3 pods ready", state="DeploymentInProgress"),
        ReadinessAlert(**endpoint, text=":red_circle: not answering", incident="readiness", reason="HTTP 500"),
        ReadinessRecovered(**endpoint, text=":large_green_circle: answering again", incidents=("readiness", "slow")),
        ReservationAppeared(**reservation, text="new reservation"),
        ReservationChanged(**reservation, text="now expired"),
        ReservationGone(**reservation, text="gone"),
        ReservationMismatch(**reservation, text="wrong zone"),
        ReservationAlert(**reservation, text="ends in 24 h"),
        ReservationEscalation(**reservation, text="ends in 2 h, nothing takes over"),
        ReservationWatchFailed(**incident, text="blind"),
        ReservationWatchRecovered(**incident, text="sees again"),
        ReservationMissing(**incident, text="no reservation"),
        ReservationFound(**incident, text="found one"),
        AdmissionChanged(**common, text="users get the fallback", admission="closed", reason="closed for deploy #4",
                         actor="kimi-ops"),
        RestoreStarted(**common, text="restoring rel-a", restore_id=12, release="rel-a"),
        AdmissionStuck(**endpoint, text="stays closed", incident="admission-stuck", reason="restore #12 failed"),
        DrainStalled(**common, text="requests still run", running=2.0, waiting=1.0),
        GateReminder(**common, text="the model gate waits", gate="model", expires_at=AT),
        WatchAlert(**common, text="burn", incident_id=3, incident="burn-page:ttft", severity="page", reason="14×",
                   context={"live_release": "rel-a"}),
        WatchRecovered(**common, text="back", incident_id=3, incident="burn-page:ttft", silenced=True),
        FailoverNotice(**common, text="on the fallback", incident_id=4),
        IncidentHandled(**common, text="", incident_id=3, action="acknowledged", actor="U0ONCALL"),
        ServiceRolledBack(**common, text="back to blue", service="kimi", to_side="blue", from_side="green",
                          release="rel-a", actor="U0DEPLOYER"),
        SloPlot(**common, text="", path="/tmp/slo.png", sha256="ab" * 32, title="kimi-prod: objectives, last hours"),
        DrillNotice(**endpoint, text="drill #3 (pod-deletion on kimi-prod) passed", drill_id=3, state="passed"),
        RampSplit(**common, step="25%", sides=({"name": "kimi-green", "weight": 25, "cohort": True, "requests": 40.0,
                                                 "ttft_p99_ms": 310.0, "error_rate": 0.0},
                                                {"name": "kimi-blue", "weight": 75, "cohort": False}),
                  next_step="50%", next_at=AT, outcome="live"),
        RampPlot(**common, path="/tmp/ramp.png", sha256="cd" * 32, title="Ramp of kimi-green · deployment #4"),
        RulesNotApplied(**common, text="rules not applied", rule="kimi-ops-slo-kimi-prod", reason="forbidden",
                        reply_to="event:9"),
    ]


def test_every_event_class_has_one_kind_and_a_sample() -> None:
    assert len(BY_KIND) == len(EVENT_CLASSES) and all(cls.KIND for cls in EVENT_CLASSES)
    assert {type(e) for e in samples(1)} == set(EVENT_CLASSES)


@pytest.mark.parametrize("event", samples(1), ids=lambda e: type(e).KIND)
def test_an_event_survives_its_row(event: OutboxEvent) -> None:
    kind, payload = to_row(event)
    assert kind == type(event).KIND
    assert from_row(kind, event.deployment_id, event.endpoint_name, payload) == event
    # The envelope is the row's columns, not its payload.
    assert "deployment_id" not in payload and "endpoint_name" not in payload


def test_rows_keep_the_payload_shape_readers_and_older_rows_use() -> None:
    state, reservation = samples(5)[1], samples(5)[13]
    _, payload = to_row(state)
    assert payload["from"] == "rolling_out" and payload["to"] == "readiness" and payload["rollout_seconds"] == 12.5
    _, payload = to_row(reservation)
    assert payload["threshold_hours"] == 24.0 and payload["reservation_id"] == "cr-0001" and payload["text"] == "ends in 24 h"
    # Rows written before events were typed: extra keys are kept as details or ignored, datetimes parsed.
    old_state = from_row("deployment.state", 5, "kimi-prod", {"from": "applying", "to": "rolling_out", "reason": "applied",
                                                              "release": "rel-a", "kind": "deploy", "endpoint": "kimi-prod",
                                                              "manifest_hash": "f" * 64})
    assert isinstance(old_state, StateChanged) and old_state.details == {"endpoint": "kimi-prod", "manifest_hash": "f" * 64}
    old_limits = from_row("limits.accepted", 5, "kimi-prod", {"deployment_id": 5, "gate_result_id": 9, "report_hash": "e" * 64,
                                                              "previous": LIMITS, "accepted": LIMITS, "accepted_by": "U1",
                                                              "accepted_at": AT.isoformat()})
    assert isinstance(old_limits, LimitsAccepted) and old_limits.accepted_at == AT and old_limits.deployment_id == 5


def test_a_row_this_version_cannot_read_is_named() -> None:
    with pytest.raises(UnknownEvent, match=r"no event kind 'deployment\.teleported'"):
        from_row("deployment.teleported", 1, None, {})
    with pytest.raises(UnknownEvent, match=r"gate\.plot"):
        from_row("gate.plot", 1, "kimi-prod", {"gate": "traffic"})  # its report row is missing
    with pytest.raises(TypeError):
        to_row(OutboxEvent())


def test_every_event_round_trips_through_the_database(make_ctx) -> None:
    ctx, _ = workflow(make_ctx)
    deployment_id = request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id
    events = samples(deployment_id)
    with ctx.uow() as uow:
        before = max(r.id for r in uow.events.undelivered(limit=1000))  # the request's own events
        for event in events:
            uow.events.emit(event, at=START)
        uow.commit()
    with ctx.uow() as uow:
        rows = [r for r in uow.events.undelivered(limit=1000) if r.id > before]
        stored = [event_of(r) for r in rows]
    assert stored == events
    assert [dataclasses.asdict(e) for e in stored] == [dataclasses.asdict(e) for e in events]
