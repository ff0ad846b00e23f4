"""The release-history store on real SQLite and real PostgreSQL: releases and audit rows that cannot change, the
database's own rules (one decision per gate, one deployment in flight), concurrent writers, and reads that stay a
few statements however long the history.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest
import yaml
from sqlalchemy import event, func, select

from bot.adapters.store import schema
from bot.adapters.store.guards import ImmutableRowError
from bot.adapters.store.models import (
    AuditEntry,
    Deployment,
    Drill,
    Endpoint,
    Event,
    GateResult,
    Incident,
    Release,
)
from bot.adapters.store.repositories import Conflict
from bot.bootstrap import build_context
from bot.config import load_settings
from bot.domain.checks import Check, GateReport
from bot.domain.coldstart import ColdStart
from bot.domain.events import StateChanged
from bot.services import followups
from bot.services.deployments import history, pending_gates
from bot.services.errors import Refused
from bot.services.readiness import endpoint_status
from bot.services.releases import list_releases, register_release
from tests.conftest import EXAMPLE_RELEASE, START


def example(name: str = "kimi-k3-2026-08-01") -> dict:
    data = yaml.safe_load(EXAMPLE_RELEASE.read_text())
    data["name"] = name
    return data


def test_register_and_list_round_trips_the_full_tuple(ctx) -> None:
    result = register_release(ctx, example(), "U0DEPLOYER")
    assert result.warnings == []
    [view] = list_releases(ctx)
    assert view.manifest == result.release.manifest
    assert view.manifest.weights.objects[2].size == 44739242496
    assert view.registered_at == START and view.registered_at.tzinfo is not None
    with ctx.uow() as uow:
        [entry] = uow.audit.list()
        assert (entry.actor, entry.action, entry.subject) == ("U0DEPLOYER", "release.registered", "release:kimi-k3-2026-08-01")


def test_duplicate_release_name_is_rejected(ctx) -> None:
    register_release(ctx, example(), "U1")
    with pytest.raises(Refused, match="already registered"):
        register_release(ctx, example(), "U2")
    # and the database itself refuses it, whatever the code path
    with ctx.uow() as uow:
        row = uow.releases.get("kimi-k3-2026-08-01")
        clone = Release(**{c.key: getattr(row, c.key) for c in Release.__table__.columns if c.key != "id"})
        with pytest.raises(Conflict):
            uow.releases.add(clone)
    assert len(list_releases(ctx)) == 1


def test_identical_tuple_under_new_name_warns(ctx) -> None:
    register_release(ctx, example("a-release"), "U1")
    result = register_release(ctx, example("b-release"), "U1")
    assert result.warnings and "a-release" in result.warnings[0]


def test_releases_and_audit_rows_cannot_be_changed(ctx) -> None:
    register_release(ctx, example(), "U1")
    with ctx.uow() as uow:
        row = uow.releases.get("kimi-k3-2026-08-01")
        row.image = "evil@sha256:" + "0" * 64
        with pytest.raises(ImmutableRowError):
            uow.commit()
    with ctx.uow() as uow:
        entry = uow.audit.list()[0]
        entry.actor = "someone-else"
        with pytest.raises(ImmutableRowError):
            uow.commit()
    with ctx.uow() as uow:
        uow.session.delete(uow.audit.list()[0])
        with pytest.raises(ImmutableRowError):
            uow.commit()
    with ctx.uow() as uow:
        assert uow.releases.get("kimi-k3-2026-08-01").image.endswith("0e2f")
        assert uow.audit.list()[0].actor == "U1"


def _endpoint_and_deployment(uow, now: dt.datetime) -> Deployment:
    ep = uow.endpoints.add(Endpoint(name="ep", kind="hyperpod", environment="prod", namespace="ns", url="http://x",
                                    settings={}, created_at=now))
    rel = uow.releases.get("kimi-k3-2026-08-01")
    return uow.deployments.add(
        Deployment(endpoint_id=ep.id, release_id=rel.id, kind="deploy", state="requested", requested_by="U1",
                   created_at=now, updated_at=now)
    )


def test_the_reads_behind_the_slack_edge_answer_alike_on_both_databases(ctx) -> None:
    """The repository reads that only the Slack edge's modules (``sqlite_only``) reach, here on both databases:
    releases newest first up to a limit, an incident by id, one incident's alert events, an endpoint's drills."""
    for day in ("01", "02", "03"):
        register_release(ctx, example(f"kimi-k3-2026-08-{day}"), "U1")
    with ctx.uow() as uow:
        ep = uow.endpoints.add(Endpoint(name="ep", kind="hyperpod", environment="prod", namespace="ns", url="http://x",
                                        settings={}, created_at=START))
        incident = uow.incidents.add(Incident(endpoint_id=ep.id, kind="burn-rate", reason="fast burn", opened_at=START))
        other = uow.incidents.add(Incident(endpoint_id=ep.id, kind="readiness", reason="down", opened_at=START))
        for about, n in ((incident.id, 2), (other.id, 1)):
            for _ in range(n):
                uow.session.add(Event(at=START, kind="incident.alert", endpoint_name="ep", payload={"incident_id": about}))
        for i in range(3):
            drill = uow.drills.add(Drill(endpoint_id=ep.id, kind="pod-deletion", state="running",
                                         requested_by="U1", requested_at=START + dt.timedelta(minutes=i)))
            drill.state, drill.active = "passed", None  # ended: it no longer holds the endpoint
            uow.session.flush()
        uow.commit()

        assert [r.name for r in uow.releases.list(limit=2)] == ["kimi-k3-2026-08-03", "kimi-k3-2026-08-02"]
        assert uow.incidents.get(incident.id).reason == "fast burn" and uow.incidents.get(10_000) is None
        alerts = uow.events.for_endpoint_kind(ep.id, "incident.alert", incident.id)
        assert len(alerts) == 2 and {e.payload["incident_id"] for e in alerts} == {incident.id}
        drills = uow.drills.for_endpoint(ep.id, limit=2)
        assert [d.requested_at for d in drills] == [START + dt.timedelta(minutes=2), START + dt.timedelta(minutes=1)]


def test_second_decision_on_a_gate_is_rejected_by_the_database(ctx) -> None:
    register_release(ctx, example(), "U1")
    with ctx.uow() as uow:
        dep = _endpoint_and_deployment(uow, START)
        common = dict(deployment_id=dep.id, gate="artifact", report={}, report_hash="h", checked_at=START)
        uow.gates.add(GateResult(**common, decision="approved", decided_by="U2", decided_at=START))
        uow.gates.add(GateResult(**common))  # a recheck row without a decision is fine
        with pytest.raises(Conflict):
            uow.gates.add(GateResult(**common, decision="rejected", decided_by="U3", decided_at=START))
        uow.rollback()


def test_a_decided_gate_result_is_frozen(ctx) -> None:
    register_release(ctx, example(), "U1")
    with ctx.uow() as uow:
        dep = _endpoint_and_deployment(uow, START)
        gate = uow.gates.add(GateResult(deployment_id=dep.id, gate="model", report={}, report_hash="h", checked_at=START))
        uow.commit()
        gate.decision, gate.decided_by, gate.decided_at = "approved", "U2", START
        uow.commit()
        gate.decision = "rejected"
        with pytest.raises(ImmutableRowError):
            uow.commit()


def test_one_deployment_in_flight_per_endpoint_is_a_database_rule(ctx) -> None:
    register_release(ctx, example(), "U1")
    with ctx.uow() as uow:
        first = _endpoint_and_deployment(uow, START)
        uow.commit()
        second = Deployment(endpoint_id=first.endpoint_id, release_id=first.release_id, kind="deploy", state="requested",
                            requested_by="U2", created_at=START, updated_at=START)
        with pytest.raises(Conflict):
            uow.deployments.add(second)
        uow.rollback()
        done = uow.deployments.get(first.id)
        done.in_flight = None  # finished deployments no longer hold the endpoint
        uow.deployments.add(Deployment(endpoint_id=first.endpoint_id, release_id=first.release_id, kind="deploy",
                                       state="requested", requested_by="U2", created_at=START, updated_at=START))
        uow.commit()


def test_a_new_deployment_takes_in_flight_from_its_state_and_refuses_a_contradiction(ctx) -> None:
    register_release(ctx, example(), "U1")
    with ctx.uow() as uow:
        first = _endpoint_and_deployment(uow, START)
        assert first.in_flight is True  # requested: it holds the endpoint
        common = dict(endpoint_id=first.endpoint_id, release_id=first.release_id, kind="deploy", requested_by="U2",
                      created_at=START, updated_at=START)
        ended = uow.deployments.add(Deployment(**common, state="live", in_flight=None))
        uow.commit()
        assert uow.deployments.get(ended.id).in_flight is None  # stored as NULL, never the old default's True
        with pytest.raises(ValueError, match="in state requested has in_flight=True, not None"):
            Deployment(**common, state="requested", in_flight=None)
        with pytest.raises(ValueError, match="in state live has in_flight=None, not True"):
            Deployment(**common, state="live", in_flight=True)


def test_naive_datetimes_are_refused(ctx) -> None:
    with ctx.uow() as uow, pytest.raises(Exception, match="naive datetime"):
        uow.audit.record(at=dt.datetime(2026, 1, 1), actor="a", action="x", subject="y")


@pytest.mark.postgres
def test_twenty_concurrent_writers_on_postgres_lose_no_rows(fresh_pg_url: str, clock, tmp_path) -> None:
    schema.upgrade(fresh_pg_url)
    ctx = build_context(load_settings(database_url=fresh_pg_url, data_dir=tmp_path), clock=clock)
    barrier = threading.Barrier(20)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            barrier.wait()
            for i in range(5):
                register_release(ctx, example(f"rel-{n}-{i}"), f"U{n}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with ctx.uow() as uow:
        assert uow.session.scalar(select(func.count()).select_from(Release)) == 100
        assert uow.session.scalar(select(func.count()).select_from(AuditEntry)) == 100
    ctx.close()


def test_a_gate_decided_before_it_was_posted_still_records_where_it_was_posted_once(ctx) -> None:
    # A rollback's evaluation is decided by kimi-ops before the notifier posts it: the post's place is
    # recorded, but only once, and the decision itself stays frozen.
    register_release(ctx, example(), "U1")
    with ctx.uow() as uow:
        dep = _endpoint_and_deployment(uow, START)
        gate = uow.gates.add(GateResult(deployment_id=dep.id, gate="model", report={}, report_hash="h", checked_at=START,
                                        decision="approved", decided_by="kimi-ops", decided_at=START))
        uow.commit()
        gate.slack_channel, gate.slack_ts = "C1", "1.000"
        uow.commit()
        gate.slack_ts = "2.000"
        with pytest.raises(ImmutableRowError):
            uow.commit()


def _count_statements(engine):
    seen: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    return seen, lambda: event.remove(engine, "before_cursor_execute", count)


def _deployments_with_gates(ctx, endpoint: str, count: int) -> None:
    """``count`` ended deployments of ``endpoint``, each with two gate reports, and one in flight at its model gate."""
    with ctx.uow() as uow:
        ep = uow.endpoints.add(Endpoint(name=endpoint, kind="hyperpod", environment="prod", namespace="ns", url="http://x",
                                        settings={"name": endpoint}, created_at=START))
        rel = uow.releases.get("kimi-k3-2026-08-01")
        for n in range(count + 1):
            last = n == count
            dep = uow.deployments.add(Deployment(
                endpoint_id=ep.id, release_id=rel.id, kind="deploy", state="model_gate" if last else "superseded",
                requested_by="U1", created_at=START, updated_at=START, applied_manifest="x" * 1000))
            for gate in ("artifact", "model"):
                report = GateReport(gate=gate, checks=[Check.warned("c", "r")])
                uow.gates.add(GateResult(deployment_id=dep.id, gate=gate, report=report.model_dump(mode="json"),
                                         status=report.status, report_hash=report.digest(), checked_at=START,
                                         **({} if last and gate == "model" else
                                            {"decision": "approved", "decided_by": "U2", "decided_at": START})))
        uow.commit()


def _rollouts_with_cold_starts(ctx, endpoint: str, loads: list[float]) -> None:
    """For each of ``loads``, what a readiness step writes (its state change carrying a cold start, and the cold start
    on the endpoint's row), then a later state change without one."""
    with ctx.uow() as uow:
        row = uow.endpoints.get(endpoint)
        dep = uow.deployments.for_endpoint(row.id, 1)[0]
        for load in loads:
            cold = ColdStart(90.0, 800.0, load, 2.0).as_dict()
            row.cold_start, row.cold_start_at = cold, START
            for details in ({"cold_start": cold}, {}):
                uow.events.emit(StateChanged(deployment_id=dep.id, endpoint_name=endpoint, from_state="readiness",
                                             to_state="model_gate", reason=None, release=dep.release.name,
                                             kind="deploy", details=details), at=START)
        uow.commit()


def test_history_gates_and_status_read_the_same_few_statements_however_long_the_history(ctx) -> None:
    """No query per deployment or per endpoint: ten times the rows, the same statements, the same answers' shape."""
    register_release(ctx, example(), "U1")
    _deployments_with_gates(ctx, "few", 2)
    _deployments_with_gates(ctx, "many", 20)
    _rollouts_with_cold_starts(ctx, "many", loads=[120.0, 300.0])
    seen, stop = _count_statements(ctx.uow.engine)
    try:
        counts = {}
        for name, limit in (("few", 3), ("many", 21)):
            seen.clear()
            views = history(ctx, name, limit)
            counts[name] = len(seen)
            assert [v.state.value for v in views] == ["model_gate"] + ["superseded"] * (limit - 1)
            assert all(g.status == "warn" for v in views for g in v.gates)
            assert views[0].pending is not None and views[0].pending.report["gate"] == "model"
        assert counts["few"] == counts["many"]
        seen.clear()
        assert {(p.endpoint, p.gate) for p in pending_gates(ctx)} == {("few", "model"), ("many", "model")}
        gates_statements = len(seen)
        seen.clear()
        statuses = endpoint_status(ctx)
        status_statements = len(seen)
    finally:
        stop()
    assert gates_statements <= 6
    assert {s.name: s.live_release for s in statuses} == {"few": None, "many": None}
    # Each endpoint's last cold start (kept on its row by the readiness step), read with the endpoints.
    assert {s.name: s.cold_start.load_s if s.cold_start else None for s in statuses} == {"few": None, "many": 300.0}
    assert status_statements <= 12  # a fixed handful: one per table a page reads


def test_follow_up_work_is_held_by_one_worker_at_a_time_on_both_databases(ctx) -> None:
    """The worker's queue: a request's runs recorded once (a copy is refused), each taken by one worker, a lapsed
    lease taken again (and counted), and only the holder finishes a run."""
    assert followups.accept(ctx, "body:a", [("first_run", {"n": 1}), ("second_run", {"n": 2})])
    assert not followups.accept(ctx, "body:a", [("first_run", {"n": 1})])  # another delivery of the same request
    one, two = followups.take(ctx, "worker-1", 30), followups.take(ctx, "worker-2", 30)
    assert one is not None and two is not None
    assert (one.function, one.request, one.attempts) == ("first_run", {"n": 1}, 1)
    assert (two.function, two.request, two.attempts) == ("second_run", {"n": 2}, 1)
    assert followups.take(ctx, "worker-3", 30) is None  # both are held
    assert not followups.finish(ctx, "worker-2", one.id) and followups.finish(ctx, "worker-1", one.id)

    followups.renew(ctx, "worker-2", [two.id], -1)  # worker-2's lease lapses (it stopped renewing)
    again = followups.take(ctx, "worker-3", 30)
    assert again is not None and (again.id, again.attempts) == (two.id, 2)
    assert not followups.finish(ctx, "worker-2", two.id) and followups.finish(ctx, "worker-3", two.id)
    assert followups.waiting(ctx) == 0
