"""The scheduler: two replicas on one PostgreSQL run each job once; leader locks; ``kimi-ops jobs`` and friends."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from apscheduler.schedulers.base import STATE_PAUSED
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from bot.adapters.aws.reservations import AwsReservationSource
from bot.adapters.endpoint.openai import HttpEndpointClient
from bot.adapters.leader import PostgresAdvisoryLock, SingleProcess, leader_lock
from bot.adapters.store import schema
from bot.bootstrap import build_context, build_root
from bot.cli import output
from bot.cli.main import app
from bot.config import load_settings
from bot.sandbox.capacity import CapacityStandIn
from bot.sandbox.openai_server import OpenAIServer
from bot.scheduler import JobRunner, next_runs
from bot.services.context import Ports
from bot.services.scheduling import runs_of
from tests.conftest import START, with_ports
from tests.jobs_support import (
    ScriptedEndpoint,
    ScriptedReservations,
    capacity_block,
    eks_endpoint,
    make_live,
)
from tests.world_support import wait_until

cli = CliRunner()
# Waits that read the job runs from the database look five times a second, not wait_until's fifty: a read is a
# session and two queries, and the serve test waits seconds for a process to start.
POLL = 0.2


def test_two_schedulers_on_one_postgres_run_each_job_once(fresh_pg_url: str, clock, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KIMI_CONFIG", raising=False)
    schema.upgrade(fresh_pg_url)
    aws = CapacityStandIn()
    aws.add_capacity_block("cr-0001", region="us-east-1", zone="us-east-1a", start=START - dt.timedelta(days=1),
                           end=START + dt.timedelta(days=2))
    with OpenAIServer() as model:
        url = model.url

        def replica():
            settings = load_settings(database_url=fresh_pg_url, data_dir=tmp_path / "data",
                                     endpoints=[eks_endpoint("kimi-prod", url=url)])
            return build_context(settings, clock=clock, reservations=AwsReservationSource(aws.client_factory()),
                                 endpoint=HttpEndpointClient(timeout=30))

        ctx_a, ctx_b = replica(), replica()
        make_live(ctx_a, "kimi-prod")
        a = JobRunner(build_root(ctx_a), PostgresAdvisoryLock(ctx_a.uow.engine, identity="replica-a"), election_seconds=0.1)
        b = JobRunner(build_root(ctx_b), PostgresAdvisoryLock(ctx_b.uow.engine, identity="replica-b"), election_seconds=0.1)
        try:
            a.start()
            b.start()
            assert a.leading and not b.leading and b.scheduler.state == STATE_PAUSED
            wait_until("both jobs to run", lambda: runs_of(ctx_a, "reservation-watch") and runs_of(ctx_a, "readiness-probe"),
                       60, poll=POLL)
            wait_until("the next runs to be stored", lambda: all(next_runs(ctx_a).values()), 60, poll=POLL)
            planned = next_runs(ctx_a)
            # The leader stops; the standby takes over and keeps the stored schedule: nothing runs again early.
            a.stop()
            wait_until("replica b to take over", lambda: b.leading, 60)
            assert next_runs(ctx_b) == planned
        finally:
            a.stop()
            b.stop()
            ctx_a.close()
            ctx_b.close()
        served = model.stats().served

    ctx = replica()
    try:
        assert len(runs_of(ctx, "reservation-watch")) == 1 and len(runs_of(ctx, "readiness-probe")) == 1
        assert all(r.ok for name in ("reservation-watch", "readiness-probe") for r in runs_of(ctx, name))
        assert served == 1  # one readiness completion, from the leader only
        assert aws.calls.count(("us-east-1", "DescribeCapacityReservations")) == 1
        # one escalation: the live endpoint's reservation ends in two days and nothing can take over
        with ctx.uow() as uow:
            kinds = [e.kind for e in uow.events.undelivered(limit=100)]
        assert kinds.count("reservation.escalation") == 1 and kinds.count("reservation.appeared") == 1
        runs = next_runs(ctx)
        assert runs["reservation-watch"] is not None and runs["readiness-probe"] is not None
    finally:
        ctx.close()


def test_the_advisory_lock_has_one_holder_and_passes_on_when_its_connection_dies(fresh_pg_url: str) -> None:
    engine = create_engine(fresh_pg_url)
    first, second = PostgresAdvisoryLock(engine, identity="a"), PostgresAdvisoryLock(engine, identity="b")
    try:
        assert first.acquire() and first.acquire()  # renewing keeps it
        assert not second.acquire()
        first.release()
        assert second.acquire() and not first.acquire()
        # The holder's connection is killed (e.g. a network partition): PostgreSQL frees the lock.
        pid = second._conn.execute(text("SELECT pg_backend_pid()")).scalar()  # type: ignore[union-attr]
        with engine.connect() as admin:
            # With a timeout (PostgreSQL 14+) it returns once the backend is gone, so the lock is free.
            assert admin.execute(text("SELECT pg_terminate_backend(:pid, 30000)"), {"pid": pid}).scalar()
        assert first.acquire()
        assert not second.acquire()
    finally:
        first.release()
        second.release()
        engine.dispose()


def test_sqlite_means_a_single_replica(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'one.db'}")
    lock = leader_lock(engine)
    assert isinstance(lock, SingleProcess) and lock.acquire()
    engine.dispose()


def test_postgres_outside_a_cluster_uses_the_advisory_lock(fresh_pg_url: str) -> None:
    engine = create_engine(fresh_pg_url)
    assert isinstance(leader_lock(engine), PostgresAdvisoryLock)
    engine.dispose()


@pytest.fixture()
def cli_ctx(make_ctx, monkeypatch):
    source, endpoint = ScriptedReservations(), ScriptedEndpoint()
    source.put(capacity_block("cr-0001", ends_in=dt.timedelta(days=5)))
    ctx = make_ctx(endpoints=[eks_endpoint("kimi-prod")], ports=Ports(reservations=source, endpoint=endpoint))
    monkeypatch.setattr("bot.cli.jobs.context", lambda: ctx)
    monkeypatch.setattr(output.stdout, "width", 400)  # one table row per line, whatever the terminal
    return ctx


def test_jobs_list_and_run_from_the_cli(cli_ctx) -> None:
    listed = cli.invoke(app, ["jobs", "list"])
    assert listed.exit_code == 0, listed.output
    assert "reservation-watch" in listed.output and "readiness-probe" in listed.output and "never" in listed.output

    ran = cli.invoke(app, ["jobs", "run", "reservation-watch"])
    assert ran.exit_code == 0, ran.output
    assert "1 reservation(s) seen; appeared: cr-0001" in ran.output

    listed = cli.invoke(app, ["jobs", "list"])
    assert "ok: 1 reservation(s) seen" in listed.output

    unknown = cli.invoke(app, ["jobs", "run", "nope"])
    assert unknown.exit_code == 1 and "no job named nope" in unknown.output


def test_a_failing_job_run_says_why_and_is_recorded(cli_ctx, monkeypatch) -> None:
    monkeypatch.setattr("bot.cli.jobs.context", lambda: with_ports(cli_ctx, reservations=None))
    ran = cli.invoke(app, ["jobs", "run", "reservation-watch"])
    assert ran.exit_code == 1 and "no AWS access is configured" in ran.output
    [run] = runs_of(cli_ctx, "reservation-watch")
    assert not run.ok and run.trigger == "manual"


def test_reservations_and_status_show_the_countdown_and_the_probe_history(cli_ctx, clock) -> None:
    make_live(cli_ctx, "kimi-prod")
    assert cli.invoke(app, ["jobs", "run", "reservation-watch"]).exit_code == 0
    clock.advance(dt.timedelta(hours=12))
    assert cli.invoke(app, ["jobs", "run", "readiness-probe"]).exit_code == 0

    shown = cli.invoke(app, ["reservations"])
    assert shown.exit_code == 0, shown.output
    assert "cr-0001" in shown.output and "kimi-prod" in shown.output and "4.5 days" in shown.output

    status = cli.invoke(app, ["status", "kimi-prod"])
    assert status.exit_code == 0, status.output
    assert "rel-live" in status.output and "first token 180 ms" in status.output and "(4.5 days left)" in status.output


def test_a_backlog_after_downtime_runs_each_job_once(make_ctx) -> None:
    """The stored schedule is four periods behind (the bot was down): coalescing runs each job once, not four times."""
    from bot.scheduler import make_scheduler

    source, endpoint = ScriptedReservations(), ScriptedEndpoint()
    source.put(capacity_block("cr-0001", ends_in=dt.timedelta(days=5)))
    ctx = make_ctx(endpoints=[eks_endpoint("kimi-prod")], reservation_watch_minutes=1, readiness_probe_minutes=1,
                   ports=Ports(reservations=source, endpoint=endpoint))
    make_live(ctx, "kimi-prod")

    # A previous leader stored the jobs; the last of them ran 3 min 10 s ago.
    previous = JobRunner(build_root(ctx), SingleProcess(identity="before"))
    previous.scheduler.start(paused=True)
    previous.ensure_jobs()
    behind = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=3, seconds=10)
    for name in ("reservation-watch", "readiness-probe"):
        previous.scheduler.modify_job(name, next_run_time=behind)
    previous.scheduler.shutdown(wait=False)

    stored = make_scheduler(ctx)
    stored.start(paused=True)
    jobs = {j.id: j for j in stored.get_jobs()}
    stored.shutdown(wait=False)
    assert {j.func_ref for j in jobs.values()} == {
        "jobs.reservation_watch:run", "jobs.readiness_probe:run", "jobs.gate_expiry:run", "jobs.metrics_watch:run"}
    assert all(j.max_instances == 1 and j.misfire_grace_time == 300 for j in jobs.values())
    assert all(j.trigger.interval == dt.timedelta(minutes=1) for j in jobs.values())  # the configured periods

    runner = JobRunner(build_root(ctx), SingleProcess(identity="after"), election_seconds=3600)
    try:
        runner.start()
        wait_until("the backlog to run", lambda: runs_of(ctx, "reservation-watch") and runs_of(ctx, "readiness-probe"), 60,
                   poll=POLL)
    finally:
        runner.stop()  # waits for the running jobs: a run still queued behind them would be counted below
    assert len(runs_of(ctx, "reservation-watch")) == 1 and len(runs_of(ctx, "readiness-probe")) == 1
    assert endpoint.calls == {"kimi-prod": 1} and source.calls == 2  # one Capacity Block read, one training-plan read


def test_a_replica_that_loses_its_lock_pauses_and_the_other_takes_over(fresh_pg_url: str, clock, tmp_path: Path,
                                                                       monkeypatch) -> None:
    monkeypatch.delenv("KIMI_CONFIG", raising=False)
    schema.upgrade(fresh_pg_url)
    settings = load_settings(database_url=fresh_pg_url, data_dir=tmp_path / "data", endpoints=[eks_endpoint("kimi-prod")])
    ctx_a = build_context(settings, clock=clock, reservations=ScriptedReservations(), endpoint=ScriptedEndpoint())
    ctx_b = build_context(settings, clock=clock, reservations=ScriptedReservations(), endpoint=ScriptedEndpoint())
    lock_a = PostgresAdvisoryLock(ctx_a.uow.engine, identity="replica-a")
    a = JobRunner(build_root(ctx_a), lock_a, election_seconds=3600)
    b = JobRunner(build_root(ctx_b), PostgresAdvisoryLock(ctx_b.uow.engine, identity="replica-b"), election_seconds=3600)
    try:
        a.start()
        b.start()
        assert a.leading and not b.leading
        # replica a's database connection is cut (a network partition): PostgreSQL frees its lock
        pid = lock_a._conn.execute(text("SELECT pg_backend_pid()")).scalar()  # type: ignore[union-attr]
        with ctx_b.uow.engine.connect() as admin:
            assert admin.execute(text("SELECT pg_terminate_backend(:pid, 30000)"), {"pid": pid}).scalar()
        assert b.elect_once() and b.scheduler.state != STATE_PAUSED
        assert not a.elect_once() and a.scheduler.state == STATE_PAUSED  # a stops running jobs
    finally:
        a.stop()
        b.stop()
        ctx_a.close()
        ctx_b.close()


def test_listing_jobs_or_stopping_a_standby_never_moves_a_due_run(make_ctx) -> None:
    """APScheduler 3 processes due jobs once more after ``shutdown``: that must not advance the shared schedule,
    or `kimi-ops jobs list` (or a standby replica stopping) would silently skip the leader's next run."""
    ctx = make_ctx(endpoints=[eks_endpoint("kimi-prod")])
    standby = JobRunner(build_root(ctx), SingleProcess(identity="standby"))
    standby.scheduler.start(paused=True)
    standby.ensure_jobs()
    due = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    names = ("reservation-watch", "readiness-probe", "gate-expiry", "metrics-watch")
    for name in names:
        standby.scheduler.modify_job(name, next_run_time=due)
    standby.stop()
    assert next_runs(ctx) == dict.fromkeys(names, due)
    assert next_runs(ctx) == dict.fromkeys(names, due)
    assert runs_of(ctx, "reservation-watch") == [] and runs_of(ctx, "readiness-probe") == []


def test_a_changed_period_replaces_the_stored_job_and_an_unchanged_one_keeps_its_schedule(make_ctx) -> None:
    from bot.scheduler import make_scheduler

    def stored(ctx) -> dict:
        scheduler = make_scheduler(ctx)
        scheduler.start(paused=True)
        try:
            return {j.id: (j.trigger.interval, j.next_run_time) for j in scheduler.get_jobs()}
        finally:
            scheduler.shutdown(wait=False)

    def leader_stores(ctx) -> None:
        runner = JobRunner(build_root(ctx), SingleProcess())
        runner.scheduler.start(paused=True)
        runner.ensure_jobs()
        runner.scheduler.shutdown(wait=False)

    leader_stores(make_ctx())
    before = stored(make_ctx())
    assert {name: interval for name, (interval, _) in before.items()} == {
        "reservation-watch": dt.timedelta(minutes=15), "readiness-probe": dt.timedelta(minutes=5),
        "gate-expiry": dt.timedelta(minutes=1), "metrics-watch": dt.timedelta(minutes=1)}
    leader_stores(make_ctx(readiness_probe_minutes=2))  # a new leader, configured differently
    after = stored(make_ctx())
    assert after["reservation-watch"] == before["reservation-watch"]  # same period: same next run
    assert after["readiness-probe"][0] == dt.timedelta(minutes=2)


def test_serve_starts_the_scheduler_and_stops_it_on_sigterm(tmp_path: Path, monkeypatch) -> None:
    """`kimi-ops serve` runs the jobs (SQLite: a single replica, which leads) and shuts them down with the bot."""
    import os
    import re
    import signal
    import subprocess
    import sys

    from bot.sandbox.slack_stub import SlackStub

    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_", "AWS_"))}
    env.update(KIMI_DATA_DIR=str(tmp_path / "data"), KIMI_AUTO_MIGRATE="1", SLACK_BOT_TOKEN="xoxb-1",
               SLACK_SIGNING_SECRET="s3cret", AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               AWS_EC2_METADATA_DISABLED="true", AWS_ENDPOINT_URL="http://127.0.0.1:9")  # AWS refuses at once
    with SlackStub() as stub:
        env["KIMI_SLACK_API_URL"] = stub.api_url
        proc = subprocess.Popen(
            [sys.executable, "-c", "from bot.cli.main import main; main()", "serve", "--host", "127.0.0.1", "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
        )
        try:
            assert re.search(r"serving on http://127\.0\.0\.1:\d+", proc.stdout.readline())
            monkeypatch.delenv("KIMI_CONFIG", raising=False)
            ctx = build_context(load_settings(data_dir=tmp_path / "data"), check=False)
            try:
                wait_until("the first runs", lambda: runs_of(ctx, "reservation-watch") and runs_of(ctx, "readiness-probe"), 60,
                           poll=POLL)
                [watch] = runs_of(ctx, "reservation-watch")
                assert "could not read us-east-1" in watch.summary  # the blind watch says so instead of failing
            finally:
                ctx.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    log = (tmp_path / "data" / "kimi-ops.log").read_text()
    assert "scheduler started as" in log and "(leader)" in log
    assert log.index("scheduler stopped") > log.index("scheduler started as")  # stopped with the bot, not killed
