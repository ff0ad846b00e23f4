"""Accepting limits while the engine moves the deployment on: the acceptance decides on the state it will commit with.

How accepted limits reach the cluster depends on where the measured deployment stands (ramping: the ramp applies
them; live: a restore does). On PostgreSQL another replica's engine can take the ramp live between the acceptance
reading the deployment and committing; the acceptance must then see "live", not store a revision for a ramp that
has ended (nobody would ever apply it). SQLite runs one writer at a time, so only PostgreSQL is raced here.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, text

from bot.domain.states import State
from bot.services.deployments import decide_gate
from bot.services.engine import Engine
from bot.services.releases import register_release
from bot.services.traffic_gate import accept_proposed_limits
from bot.services.transitions import transition
from tests.services.test_limits_procedure import propose_limits, to_traffic_gate
from tests.workflow_support import ADMIN, ROLES, endpoint_config, fake_ports, release_data
from tests.world_support import in_background, joined, wait_until


# PostgreSQL only: SQLite serialises writers, so there the acceptance cannot interleave with the engine's transaction.
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_an_acceptance_racing_the_ramp_going_live_applies_them_to_the_live_release(make_ctx: Any) -> None:
    ctx = make_ctx(endpoints=[endpoint_config(ramp={"approval_steps": [100]})], roles=ROLES, ports=fake_ports())
    register_release(ctx, release_data("rel-a"), "U0DEPLOYER")
    engine = Engine(ctx, readiness_pause=0)
    view = to_traffic_gate(ctx, engine)
    decide_gate(ctx, view.id, "traffic", "approved", ADMIN, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash)
    assert engine.advance(view.id).state == "ramping"  # held before everyone: the ramp's approval step
    report_hash = propose_limits(ctx, view.id, 5, 10)

    # The engine's last ramp transaction, held open: the deployment row is locked and moving to live.
    with ctx.uow() as uow:
        dep = uow.deployments.get_for_update(view.id)
        transition(uow, ctx, dep, State.LIVE, reason="ramp complete")
        uow.flush()
        accepting, accepted = in_background(
            lambda: accept_proposed_limits(ctx, None, view.id, ADMIN, seen_report_hash=report_hash))
        watcher = create_engine(ctx.settings.database_url)
        try:
            def blocked() -> bool:
                with watcher.connect() as conn:
                    return bool(conn.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                                 "AND datname = current_database()")))

            wait_until("the acceptance waiting on the engine's transaction", blocked)
        finally:
            watcher.dispose()
        uow.commit()

    done = joined(accepting, accepted)
    # Decided on the live deployment: a restore carries the limits (was: a revision left for a ramp that had ended).
    assert not done.ramping and done.restore_id is not None and done.drive == done.restore_id
