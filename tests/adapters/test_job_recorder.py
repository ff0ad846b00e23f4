"""The acknowledgement's write (``bot/adapters/store/work.JobRecorder``): each request's claim and typed job in the
shared database before its answer leaves; on PostgreSQL the jobs of concurrent acknowledgements in one statement."""

from __future__ import annotations

import datetime as dt
import threading

from sqlalchemy import select

from bot.adapters.store.models import SlackDelivery, SlackWork
from bot.adapters.store.work import JobRecorder
from bot.slack.job import Job


def test_concurrent_acknowledgements_record_each_request_once_as_it_was_typed(ctx) -> None:
    """Twelve acknowledgements at once, each request arriving twice (a redelivery racing its original): every
    request is taken once, its copy is told so, and the job the worker will read is the one acknowledged, at the
    moment it was acknowledged: each job its own time, even when one round writes them all (given in another time
    zone, stored as the same instant)."""
    recorder = JobRecorder(ctx.uow.engine, wait_seconds=30)
    at = dt.datetime(2026, 12, 5, 8, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    jobs = [Job("command", f"body:{n}", "U0TYPIST", channel="C0KIMIOPS", args={"text": f"status kimi-{n}"})
            for n in range(6)]
    taken: dict[str, list[bool]] = {job.key: [] for job in jobs}
    acknowledged_at = {job.key: at + dt.timedelta(seconds=n) for n, job in enumerate(jobs)}
    start = threading.Barrier(12)

    def acknowledge(job: Job) -> None:
        start.wait()
        won = recorder.record(job.key, job.kind, job.as_json(), acknowledged_at[job.key])
        taken[job.key].append(won)

    threads = [threading.Thread(target=acknowledge, args=(job,)) for job in jobs * 2]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        recorder.close()

    assert {key: sorted(outcomes) for key, outcomes in taken.items()} == {job.key: [False, True] for job in jobs}
    with ctx.uow.engine.connect() as conn:
        rows = conn.execute(select(SlackWork.function, SlackWork.request, SlackWork.created_at)).all()
        claims = conn.execute(select(SlackDelivery.key, SlackDelivery.received_at)).all()
    assert sorted((row.function, row.request["args"]["text"]) for row in rows) == sorted(
        ("command", f"status kimi-{n}") for n in range(6))
    assert {row.request['key']: Job.from_json(row.request) for row in rows} == {job.key: job for job in jobs}
    assert {row.request["key"]: row.created_at for row in rows} == acknowledged_at
    assert {claim.key: claim.received_at for claim in claims} == acknowledged_at
    assert sorted(claim.key for claim in claims) == sorted(job.key for job in jobs)


def test_a_request_claimed_by_an_earlier_delivery_records_nothing(ctx) -> None:
    """A copy arriving after its original was recorded (another replica's, or before a restart) is dropped: no
    second job."""
    recorder = JobRecorder(ctx.uow.engine, wait_seconds=30)
    at = dt.datetime(2026, 12, 5, 6, 0, tzinfo=dt.UTC)
    job = Job("approve", "body:click", "U0APPROVER", args={"value": "ticket"})
    try:
        assert recorder.record(job.key, job.kind, job.as_json(), at) is True
        assert recorder.record(job.key, job.kind, job.as_json(), at + dt.timedelta(seconds=1)) is False
    finally:
        recorder.close()
    with ctx.uow.engine.connect() as conn:
        assert len(conn.execute(select(SlackWork.id)).all()) == 1
