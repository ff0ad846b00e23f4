"""Deployment leases: one replica drives an endpoint's in-flight work; a lapsed lease is taken over.

On SQLite and PostgreSQL (the ``db_url`` fixture): the repository's claim lets
one of two claimers win, a lapse lets the other take over and locks the first
out of renewing; the engine does not act on a deployment whose lease another
replica holds, and lists it for takeover only once that lease lapsed.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from bot.adapters.store.models import Deployment, Endpoint
from bot.bootstrap import build_context
from bot.config import load_settings
from bot.services.engine import Engine
from bot.services.releases import register_release
from tests.adapters.test_store import example

NOW = dt.datetime(2027, 1, 21, 10, 0, tzinfo=dt.UTC)
LEASE = dt.timedelta(seconds=15)


def _deployment(ctx, state: str = "requested") -> Deployment:  # type: ignore[no-untyped-def]
    register_release(ctx, example(), "U1")
    now = dt.datetime.now(dt.UTC)
    with ctx.uow() as uow:
        ep = uow.endpoints.add(Endpoint(name="ep", kind="hyperpod", environment="prod", namespace="ns", url="http://x",
                                        settings={}, created_at=now))
        rel = uow.releases.get("kimi-k3-2026-08-01")
        dep = uow.deployments.add(Deployment(endpoint_id=ep.id, release_id=rel.id, kind="deploy", state=state,
                                             requested_by="U1", created_at=now, updated_at=now))
        uow.commit()
        return dep


def _claim(ctx, dep: Deployment, holder: str, at: dt.datetime) -> bool:  # type: ignore[no-untyped-def]
    with ctx.uow() as uow:
        won = uow.leases.claim(dep.endpoint_id, dep.id, holder, at, at + LEASE)
        uow.commit()
        return won


def _renew(ctx, dep: Deployment, holder: str, until: dt.datetime) -> bool:  # type: ignore[no-untyped-def]
    with ctx.uow() as uow:
        kept = uow.leases.renew(dep.endpoint_id, holder, until)
        uow.commit()
        return kept


def test_of_two_claimers_one_wins_until_its_lease_lapses(ctx) -> None:  # type: ignore[no-untyped-def]
    dep = _deployment(ctx)
    assert _claim(ctx, dep, "replica-a", NOW)
    assert not _claim(ctx, dep, "replica-b", NOW + dt.timedelta(seconds=1))
    assert _claim(ctx, dep, "replica-a", NOW + dt.timedelta(seconds=2))  # the holder re-claims its own
    assert _renew(ctx, dep, "replica-a", NOW + dt.timedelta(seconds=30))
    assert not _renew(ctx, dep, "replica-b", NOW + dt.timedelta(seconds=30))  # only the holder renews
    assert not _claim(ctx, dep, "replica-b", NOW + dt.timedelta(seconds=29))  # renewed: still alive

    # A lapse (no heartbeat: a crash) lets the other take over, and the first can no longer renew or fence.
    assert _claim(ctx, dep, "replica-b", NOW + dt.timedelta(seconds=31))
    assert not _renew(ctx, dep, "replica-a", NOW + dt.timedelta(seconds=60))
    with ctx.uow() as uow:
        assert uow.leases.holds(dep.endpoint_id, "replica-b") and not uow.leases.holds(dep.endpoint_id, "replica-a")


def test_a_released_lease_is_free_at_once(ctx) -> None:  # type: ignore[no-untyped-def]
    dep = _deployment(ctx)
    assert _claim(ctx, dep, "replica-a", NOW)
    with ctx.uow() as uow:
        uow.leases.release(dep.endpoint_id, "replica-b", NOW)  # not its lease: nothing happens
        uow.commit()
    assert not _claim(ctx, dep, "replica-b", NOW + dt.timedelta(seconds=1))
    with ctx.uow() as uow:
        uow.leases.release(dep.endpoint_id, "replica-a", NOW + dt.timedelta(seconds=1))
        uow.commit()
    assert _claim(ctx, dep, "replica-b", NOW + dt.timedelta(seconds=1))


def test_an_advance_does_not_act_while_another_replica_holds_the_lease(ctx) -> None:  # type: ignore[no-untyped-def]
    dep = _deployment(ctx)
    now = dt.datetime.now(dt.UTC)
    assert _claim(ctx, dep, "replica-elsewhere", now)
    engine = Engine(ctx)
    view = engine.advance(dep.id)
    assert view.state == "requested"  # not moved to its artifact gate: the other replica drives it
    assert engine.resume_all()[0].state == "requested"  # a start-up leaves it alone too
    assert engine.lapsed() == []  # alive elsewhere: nothing to take over

    with ctx.uow() as uow:  # the other replica dies: its lease is not renewed past now
        uow.leases.renew(dep.endpoint_id, "replica-elsewhere", dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1))
        uow.commit()
    assert engine.lapsed() == [dep.id]


def test_a_deployment_waiting_for_a_person_is_not_taken_over(ctx) -> None:  # type: ignore[no-untyped-def]
    dep = _deployment(ctx, state="drain_stalled")
    with ctx.uow() as uow:
        uow.deployments.get(dep.id).updated_at = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        uow.commit()
    assert Engine(ctx).lapsed() == []


@pytest.mark.postgres
def test_ten_replicas_claiming_at_once_on_postgres_one_wins(fresh_pg_url: str, clock, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from bot.adapters.store import schema

    schema.upgrade(fresh_pg_url)
    ctx = build_context(load_settings(database_url=fresh_pg_url, data_dir=tmp_path), clock=clock)
    try:
        dep = _deployment(ctx)
        def claim_at_once(at: dt.datetime, round_: int) -> list[str]:
            barrier = threading.Barrier(10)
            won: list[str] = []

            def claimer(n: int) -> None:
                barrier.wait()
                if _claim(ctx, dep, f"replica-{round_}-{n}", at):
                    won.append(f"replica-{round_}-{n}")

            threads = [threading.Thread(target=claimer, args=(n,)) for n in range(10)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return won

        for round_, at in enumerate((NOW, NOW + dt.timedelta(seconds=20))):  # a free row, then a lapsed one
            won = claim_at_once(at, round_)
            assert len(won) == 1, won
            with ctx.uow() as uow:
                assert uow.leases.holds(dep.endpoint_id, won[0])
    finally:
        ctx.close()
