"""The pair failover drill: a pod-deletion drill on the side of a pair users are on shows the whole story.

A service of two sides with a smaller ``route.fallback``; users are on BLUE, GREEN holds nothing checked. The drill
deletes BLUE's pod (the impact accepted); its looks page ``readiness``, the failover round closes the service's route
to the fallback model (never to GREEN) and says why in the readiness incident's thread, the controller brings the pod
back two minutes later (on the test's clock), the readiness suite passes and users are back on BLUE. The drill's record
has its detection, the time users spent on the fallback and its recovery. While the drill waits between looks, a
user's request through the gateway says which model answered it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import httpx
import pytest

from bot.adapters.clock import FrozenClock
from bot.adapters.cluster.rest import object_path
from bot.adapters.store.models import Incident
from bot.domain.drills import seconds
from bot.route_config import MODEL_PORT
from bot.sandbox.stack import APPROVER_1, BLUE, DEPLOYER, GREEN, NAMESPACE, SERVICE, Sandbox
from bot.sandbox.traffic import FALLBACK_MODEL, FALLBACK_SERVICE, GATEWAY_NAME, GATEWAY_NAMESPACE
from bot.services.access import Identity
from bot.services.admission import FAILOVER
from bot.services.drills import decide_drill, list_drills, request_drill, run_drill
from tests.conftest import START
from tests.world_support import live_with_users

pytestmark = pytest.mark.timeout(300)

USER = "drill-watcher"
ROUTE = {"gateway": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE},
         "fallback": {"name": FALLBACK_SERVICE, "port": MODEL_PORT, "model_name": FALLBACK_MODEL}}


class AskingClock(FrozenClock):
    """The test's clock; each time the drill waits between looks, a user asks the gateway (which model answers)."""

    def __init__(self) -> None:
        super().__init__(START)
        self.gateway_url: str | None = None
        self.answered: list[str] = []

    def ask(self) -> None:
        """One user's request through the gateway: which model answered it, and how (``kimi-fallback-small 200``)."""
        assert self.gateway_url is not None
        answer = httpx.post(f"{self.gateway_url}/v1/chat/completions", timeout=30,
                            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "user": USER})
        self.answered.append(f"{answer.headers.get('x-kimi-model', '-')} {answer.status_code}")

    def sleep(self, seconds: float) -> None:
        if self.gateway_url is not None:
            self.ask()
        super().sleep(seconds)


@pytest.fixture()
def world(tmp_path) -> Iterator[tuple[Sandbox, AskingClock]]:
    clock = AskingClock()
    sandbox = Sandbox(tmp_path / "sandbox", clock=clock, drills=True, pair=True, service_overrides={"route": ROUTE},
                      settings_overrides={"drill_poll_seconds": 15, "drill_timeout_minutes": 30}).start()
    try:
        live_with_users(sandbox, BLUE)
        clock.gateway_url = sandbox.gateway_url
        yield sandbox, clock
    finally:
        sandbox.stop()


def _weights(sandbox: Sandbox) -> set[str]:
    route = sandbox.stand_ins["kube"].rest().get(object_path("HTTPRoute", SERVICE, NAMESPACE))
    return {ref["name"] for rule in route["spec"]["rules"] for ref in rule["backendRefs"] if ref["weight"] > 0}


def test_a_drill_on_the_side_users_are_on_moves_them_to_the_fallback_and_back(world) -> None:
    sandbox, clock = world
    ctx = sandbox.ctx
    assert _weights(sandbox) == {BLUE}
    green = sandbox.side_server(GREEN).users()
    asked = request_drill(ctx, Identity(DEPLOYER), BLUE, "pod-deletion", accept_user_impact=True)
    decide_drill(ctx, Identity(APPROVER_1), asked.id, approve=True)
    ended = run_drill(ctx, asked.id)
    assert ended.state == "passed", ended.reason
    assert ended.detection_seconds is not None and ended.recovery_seconds is not None
    assert ended.detection_seconds < ended.recovery_seconds

    # A user asked between the drill's looks and once after it: BLUE's errors while its pod was gone (until the
    # page), the fallback's answers, then Kimi K3 on BLUE again.
    clock.ask()
    release = sandbox.releases[0].name
    seen = [a for i, a in enumerate(clock.answered) if i == 0 or a != clock.answered[i - 1]]
    assert seen == [f"{release} 503", f"{FALLBACK_MODEL} 200", f"{release} 200"], clock.answered
    assert sandbox.side_server(GREEN).users() == green  # never onto the side nobody checked

    with ctx.uow() as uow:
        drill = uow.drills.get(asked.id)
        details = dict(drill.details or {})
        row = uow.endpoints.get(BLUE)
        assert uow.incidents.open_for(row.id, FAILOVER) is None
        notices = [dict(e.payload) for e in uow.events.undelivered(500) if e.kind == "failover.notice"]
        threads = {uow.session.get(Incident, n.get("incident_id")).kind for n in notices}
        admission = row.admission
    assert "users moved to the fallback" in details["notes"] and "users back on Kimi K3" in details["notes"]
    # From the third failed look (the page) until the pod was back and answered: most of its two minutes.
    assert 60 <= details["on_fallback_seconds"] <= 150
    [listed] = list_drills(ctx, Identity(APPROVER_1), BLUE)  # /kimi drills, kimi-ops drills -o json
    assert listed.on_fallback_seconds == details["on_fallback_seconds"]
    assert f"users on the fallback for {seconds(dt.timedelta(seconds=details['on_fallback_seconds']))}" in listed.line
    said, back = (str(n["text"]) for n in notices)
    assert "Kimi K3 stopped answering (readiness:" in said and f"the fallback model ({FALLBACK_SERVICE})" in said
    assert "users are back on Kimi K3 after" in back
    assert threads == {"readiness"}  # both said in the thread of the readiness incident that moved them
    assert admission == "open" and _weights(sandbox) == {BLUE}
    assert sandbox.side_server(BLUE).users()[USER] >= 2  # before the drill and after it
