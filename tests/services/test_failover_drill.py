"""The failover drill: a pod-deletion drill on a live endpoint with users and a fallback shows the whole story.

The drill deletes the model's pod (users admitted, the impact accepted); its looks page ``readiness``, the
failover round moves users to the fallback, the controller brings the pod back two minutes later (on the test's
clock), the readiness suite passes and users are back on Kimi K3, with the time they spent on the fallback
recorded. The drill's record says both moves.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.adapters.clock import FrozenClock
from bot.sandbox.stack import APPROVER_1, DEPLOYER, ENDPOINT, Sandbox
from bot.services.access import Identity
from bot.services.admission import FAILOVER
from bot.services.drills import decide_drill, request_drill, run_drill
from tests.conftest import START
from tests.world_support import live_with_users

pytestmark = pytest.mark.timeout(300)


@pytest.fixture()
def world(tmp_path) -> Iterator[Sandbox]:
    sandbox = Sandbox(tmp_path / "sandbox", clock=FrozenClock(START), drills=True,
                      settings_overrides={"drill_poll_seconds": 15, "drill_timeout_minutes": 30}).start()
    try:
        live_with_users(sandbox, ENDPOINT)
        yield sandbox
    finally:
        sandbox.stop()


def test_a_drill_moves_users_to_the_fallback_and_back_and_records_how_long(world: Sandbox) -> None:
    asked = request_drill(world.ctx, Identity(DEPLOYER), ENDPOINT, "pod-deletion", accept_user_impact=True)
    decide_drill(world.ctx, Identity(APPROVER_1), asked.id, approve=True)
    ended = run_drill(world.ctx, asked.id)
    assert ended.state == "passed", ended.reason
    with world.ctx.uow() as uow:
        drill = uow.drills.get(asked.id)
        notes = list((drill.details or {}).get("notes") or [])
        row = uow.endpoints.get(ENDPOINT)
        assert uow.incidents.open_for(row.id, FAILOVER) is None
        closed = [d for (_a, _who, _at, d) in uow.audit.actions(f"endpoint:{ENDPOINT}", "incident.closed")
                  if d.get("kind") == FAILOVER]
        admission = row.admission
    assert "users moved to the fallback" in notes and "users back on Kimi K3" in notes
    # From the third failed look (the page) until the pod was back and answered: most of its two minutes.
    assert closed and 60 <= closed[0]["on_fallback_seconds"] <= 150
    assert admission == "open"
