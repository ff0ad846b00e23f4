"""The store's schema on real SQLite and real PostgreSQL: migrations up, down and up again, the models and the
migrations agreeing, a schema behind or ahead refused, and what each data migration fills in.
"""

from __future__ import annotations

import json

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from sqlalchemy import create_engine, inspect, select, text
from sqlalchemy.orm import Session

from bot.adapters.store import make_engine, schema
from bot.adapters.store.models import (
    Base,
    Deployment,
)
from bot.domain.coldstart import ColdStart
from tests.conftest import START


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


def test_the_quick_schema_check_finds_alembics_head(db_url: str) -> None:
    """The start-up check reads the head from the version files without Alembic; it must be Alembic's head."""
    assert schema.quick_head() == schema.head_revision()
    engine = make_engine(db_url)
    assert schema.stored_revision(engine) == schema.current_revision(engine) == schema.head_revision()
    engine.dispose()
