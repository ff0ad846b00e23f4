"""The release-history store on real SQLite and real PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
import threading

import pytest
import yaml
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from sqlalchemy import create_engine, event, func, inspect, select, text
from sqlalchemy.orm import Session

from bot.adapters.store import make_engine, schema
from bot.adapters.store.guards import ImmutableRowError
from bot.adapters.store.models import (
    AuditEntry,
    Base,
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


def test_upgrade_downgrade_upgrade_round_trip(empty_db_url: str) -> None:
    engine = make_engine(empty_db_url)
    schema.upgrade(empty_db_url)
    assert schema.current_revision(engine) == schema.head_revision()
    assert "releases" in inspect(engine).get_table_names()
    schema.downgrade(empty_db_url, "base")
    assert schema.current_revision(engine) is None
    assert "releases" not in inspect(engine).get_table_names()
    schema.upgrade(empty_db_url)
    assert schema.current_revision(engine) == schema.head_revision()
    engine.dispose()


def test_upgrade_marks_failed_deployments_that_offered_a_rollback(empty_db_url: str) -> None:
    """0002 adds deployments.rollback_offered to a database with history, filled from the old reason text once."""
    engine = make_engine(empty_db_url)
    schema.upgrade(empty_db_url, "0001")
    now = START.isoformat()
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO endpoints "
                          "(id, name, kind, environment, namespace, url, admission_open, settings, created_at) "
                          "VALUES (1, 'kimi-prod', 'hyperpod', 'prod', 'kimi', 'http://x', true, '{}', :now)"),
                     {"now": now})
        conn.execute(text("INSERT INTO releases (id, name, model_repo, model_commit, weights_prefix, objects, image, "
                          "serving_args, serving_env, licence_version, licence_sha256, tuple_hash, registered_by, "
                          "registered_at) VALUES "
                          "(1, 'rel-a', 'm/k3', :commit, 's3://w/', '[]', 'img@sha256:0', '[]', '{}', 'v1', :sha, :sha, "
                          "'U1', :now)"),
                     {"commit": "0" * 40, "sha": "a" * 64, "now": now})
        for dep_id, state, reason in ((1, "superseded", "superseded by deployment #2"),
                                      (2, "failed", "rollout failed: image pull backoff; rollback offered"),
                                      (3, "failed", "the artifact gate errored"),
                                      (4, "cancelled", "cancelled by U1 while readiness; "
                                                       "the cluster may carry its manifest, rollback offered")):
            conn.execute(text("INSERT INTO deployments (id, endpoint_id, release_id, kind, state, state_reason, in_flight, "
                              "requested_by, created_at, updated_at) "
                              "VALUES (:id, 1, 1, 'deploy', :state, :reason, NULL, 'U1', :now, :now)"),
                         {"id": dep_id, "state": state, "reason": reason, "now": now})
        # Rows that reference deployments: the upgrade must not rebuild the table under them.
        conn.execute(text("INSERT INTO events (at, kind, deployment_id, endpoint_name, payload, attempts) "
                          "VALUES (:now, 'deployment.state', 2, 'kimi-prod', '{}', 0)"), {"now": now})
    schema.upgrade(empty_db_url)
    with engine.connect() as conn:
        offered = dict(conn.execute(text("SELECT id, rollback_offered FROM deployments ORDER BY id")).all())
    assert {k: bool(v) for k, v in offered.items()} == {1: False, 2: True, 3: False, 4: False}
    # New rows get false without naming the column; the ORM reads the stored value back.
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO deployments (id, endpoint_id, release_id, kind, state, in_flight, requested_by, "
                          "created_at, updated_at) VALUES (5, 1, 1, 'deploy', 'requested', true, 'U1', :now, :now)"),
                     {"now": now})
    with Session(engine) as session:
        offered = [d.rollback_offered for d in session.scalars(select(Deployment).order_by(Deployment.id))]
        assert offered == [False, True, False, False, False]
    schema.downgrade(empty_db_url, "0001")
    assert "rollback_offered" not in {c["name"] for c in inspect(engine).get_columns("deployments")}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM deployments")).scalar_one() == 5
    engine.dispose()


def test_models_and_migrations_agree(db_url: str) -> None:
    engine = create_engine(db_url)
    # APScheduler keeps its job table in the same database; it is not ours to migrate (migrations/env.py filters
    # it the same way), so a database the scheduler has used still agrees with the models.
    jobs = SQLAlchemyJobStore(engine=engine)
    jobs.start(None, "default")  # type: ignore[arg-type]  # the scheduler is only needed to run jobs
    assert "apscheduler_jobs" in inspect(engine).get_table_names()
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": schema.include_object})
        diff = compare_metadata(ctx, Base.metadata)
    engine.dispose()
    assert diff == []


def test_schema_behind_is_refused_with_the_command_to_run(empty_db_url: str) -> None:
    engine = make_engine(empty_db_url)
    with pytest.raises(schema.SchemaMismatch, match="kimi-ops db upgrade"):
        schema.check_schema(engine)
    schema.check_schema(engine, auto_migrate=True)
    assert schema.current_revision(engine) == schema.head_revision()
    engine.dispose()


def test_schema_ahead_is_refused(db_url: str) -> None:
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = 'ffff9999'")
    with pytest.raises(schema.SchemaMismatch, match="newer than this kimi-ops"):
        schema.check_schema(engine, auto_migrate=True)
    engine.dispose()


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


def test_upgrade_fills_each_gate_result_status_from_its_stored_report(empty_db_url: str) -> None:
    """0009 adds gate_results.status; rows written before it get their report's worst check status, in SQL."""
    engine = make_engine(empty_db_url)
    schema.upgrade(empty_db_url, "0008")
    now = START.isoformat()
    reports = {1: [{"status": "pass"}, {"status": "error"}, {"status": "fail"}], 2: [{"status": "warn"}, {"status": "pass"}],
               3: [{"status": "pass"}], 4: []}
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO endpoints (id, name, kind, environment, namespace, url, admission_open, admission, "
                          "settings, created_at) VALUES (1, 'kimi-prod', 'hyperpod', 'prod', 'kimi', 'http://x', true, "
                          "'open', '{}', :now)"), {"now": now})
        conn.execute(text("INSERT INTO releases (id, name, model_repo, model_commit, weights_prefix, objects, image, "
                          "serving_args, serving_env, licence_version, licence_sha256, tuple_hash, registered_by, "
                          "registered_at) VALUES (1, 'rel-a', 'm/k3', :commit, 's3://w/', '[]', 'img@sha256:0', '[]', "
                          "'{}', 'v1', :sha, :sha, 'U1', :now)"), {"commit": "0" * 40, "sha": "a" * 64, "now": now})
        conn.execute(text("INSERT INTO deployments (id, endpoint_id, release_id, kind, state, in_flight, requested_by, "
                          "created_at, updated_at) VALUES (1, 1, 1, 'deploy', 'model_gate', true, 'U1', :now, :now)"),
                     {"now": now})
        for gate_id, checks in reports.items():
            listed = [{"name": f"c{i}", "reason": "r", **c} for i, c in enumerate(checks)]
            report = json.dumps({"gate": "model", "checks": listed})
            conn.execute(text("INSERT INTO gate_results (id, deployment_id, gate, report, report_hash, checked_at) "
                              "VALUES (:id, 1, 'model', :report, 'h', :now)"), {"id": gate_id, "report": report, "now": now})
    schema.upgrade(empty_db_url)
    with engine.connect() as conn:
        status = dict(conn.execute(text("SELECT id, status FROM gate_results ORDER BY id")).all())
    assert status == {1: "error", 2: "warn", 3: "pass", 4: "pass"}
    schema.downgrade(empty_db_url, "0008")
    assert "status" not in {c["name"] for c in inspect(engine).get_columns("gate_results")}
    engine.dispose()


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


def test_upgrade_keeps_each_endpoints_newest_cold_start_from_its_events(empty_db_url: str) -> None:
    """0017 copies each endpoint's newest state change carrying a cold start onto the endpoint's row, once."""
    engine = make_engine(empty_db_url)
    schema.upgrade(empty_db_url, "0014")
    now = START.isoformat()
    with engine.begin() as conn:
        for endpoint_id, name in ((1, "kimi-prod"), (2, "kimi-none")):
            conn.execute(text("INSERT INTO endpoints (id, name, kind, environment, namespace, url, admission_open, settings, "
                              "created_at) VALUES (:id, :name, 'hyperpod', 'prod', 'kimi', 'http://x', true, '{}', :now)"),
                         {"id": endpoint_id, "name": name, "now": now})
        for load, at in ((120.0, "2026-11-01T10:00:00+00:00"), (300.0, "2026-11-02T10:00:00+00:00"), (None, now)):
            payload = json.dumps({"to": "model_gate", **({"cold_start": ColdStart(90.0, 800.0, load, 2.0).as_dict()}
                                                         if load is not None else {})})
            conn.execute(text("INSERT INTO events (at, kind, endpoint_name, payload, attempts) "
                              "VALUES (:at, 'deployment.state', 'kimi-prod', :payload, 0)"), {"at": at, "payload": payload})
    schema.upgrade(empty_db_url)
    ctx_rows = {}
    with engine.connect() as conn:
        for name in ("kimi-prod", "kimi-none"):
            ctx_rows[name] = conn.execute(text("SELECT cold_start, cold_start_at FROM endpoints WHERE name = :n"),
                                          {"n": name}).one()
    engine.dispose()
    cold, at = ctx_rows["kimi-prod"]
    cold = json.loads(cold) if isinstance(cold, str) else cold
    assert ColdStart.from_dict(cold).load_s == 300.0
    assert str(at).startswith("2026-11-02")
    assert tuple(ctx_rows["kimi-none"]) == (None, None)


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


def test_the_quick_schema_check_finds_alembics_head(db_url: str) -> None:
    """The start-up check reads the head from the version files without Alembic; it must be Alembic's head."""
    assert schema.quick_head() == schema.head_revision()
    engine = make_engine(db_url)
    assert schema._quick_current(engine) == schema.current_revision(engine) == schema.head_revision()
    engine.dispose()


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
