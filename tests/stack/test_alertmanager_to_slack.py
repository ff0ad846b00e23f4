"""A real Alertmanager routes kimi-ops's alerts to the Slack app's webhook: one page per alert, in the endpoint's
channel with the live release and the buttons; resolved, the page is edited; Silence… creates a real silence.

The alerts are posted to Alertmanager's API v2 as Prometheus posts a firing rule's alert (labels as
:mod:`bot.domain.alert_rules` renders them). Alertmanager repeats the group every second or so here, so the
"once" is checked against its own count of notifications sent.
"""

from __future__ import annotations

import datetime as dt

import pytest

from bot.adapters.clock import FrozenClock
from bot.services.alert_intake import Reconciler
from bot.views.actions import INCIDENT_ACK, INCIDENT_ROLLBACK, INCIDENT_SILENCE
from tests.alertmanager_support import DEPLOYMENT_THREAD, routed_alertmanager
from tests.promtool_support import Alertmanager
from tests.slack_support import CHANNEL, blocks_text, button
from tests.workflow_support import ROLES, endpoint_config
from tests.world_support import wait_until

TOKEN = "am-webhook-token-0123456789abcdef"
LABELS = {"alertname": "KimiOpsErrorBudgetBurn", "endpoint": "kimi-prod", "objective": "ttft", "severity": "page",
          "kimi_ops_kind": "burn-page:ttft", "release": "rel-b"}
ANNOTATIONS = {"summary": "kimi-prod: time to first token p99 ≤ 2000 ms is burning its 7d error budget",
               "description": "time to first token p99: 40% of requests bad over the long window, budget 1.00%"}


@pytest.fixture()
def clock() -> FrozenClock:
    return FrozenClock(dt.datetime.now(dt.UTC))  # Alertmanager refuses silences that ended in the past


@pytest.fixture()
def routed(make_ctx, tmp_path):
    with routed_alertmanager(make_ctx, tmp_path, TOKEN) as both:
        yield both


def fire(manager: Alertmanager, *, resolved: bool = False) -> None:
    alert: dict = {"labels": LABELS, "annotations": ANNOTATIONS, "generatorURL": "http://prometheus/graph"}
    if resolved:
        alert["endsAt"] = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)).isoformat()
    assert manager.client.post(f"{manager.url}/api/v2/alerts", json=[alert]).status_code == 200


def pages(stub) -> list:
    """The pages in the channel (not thread replies, not ephemeral answers)."""
    return [m for m in stub.messages if m.ephemeral_to is None and "burn-page:ttft" in blocks_text(m.blocks)
            and m.thread_ts is None]


def test_a_firing_alert_is_paged_once_resolved_in_place_and_silenced_in_alertmanager(routed) -> None:
    bench, manager = routed
    fire(manager)
    [page] = wait_until("the page in the endpoint's channel", lambda: pages(bench.stub))
    text = blocks_text(page.blocks)
    assert page.channel == CHANNEL and "live: *rel-b*" in text and "last deployment #" in text
    # A link to the thread the live release's deployment was followed in.
    assert f"<https://slack.com/archives/{CHANNEL}/p{DEPLOYMENT_THREAD.replace('.', '')}|its thread>" in text
    assert "40% of requests bad" in text
    for action in (INCIDENT_ACK, INCIDENT_SILENCE, INCIDENT_ROLLBACK):
        assert button(page, action)
    sent = manager.notifications()
    # Alertmanager repeats a group a second or more apart here: looking at its counter more often is wasted CPU.
    wait_until("Alertmanager repeating the group", lambda: manager.notifications() >= sent + 3, timeout=30, poll=0.2)
    assert len(pages(bench.stub)) == 1  # every repeat found the incident open

    fire(manager, resolved=True)
    wait_until("the page edited as recovered", lambda: "recovered" in blocks_text(page.blocks))
    assert not [b for b in page.blocks if b.get("type") == "actions"]
    [recovery] = wait_until("the recovery said in the page's thread", lambda: [
        m for m in bench.stub.thread(CHANNEL, page.ts) if m.thread_ts == page.ts and "recovered" in m.text])
    assert "Alertmanager resolved the alert" in recovery.text

    fire(manager)  # it burns again: a new page
    wait_until("a second page", lambda: len(pages(bench.stub)) == 2)
    again = pages(bench.stub)[-1]
    bench.click("U0DEPLOYER", again, INCIDENT_SILENCE)
    view = bench.stub.wait_for(lambda s: s.calls_to("views.open"))[-1].params["view"]
    bench.post(bench.sender.submit("U0DEPLOYER", view, {"reason": {"reason": "vLLM upgrade soak, OPS-77"},
                                                        "hours": {"hours": "4"}}))
    bench.stub.wait_for(lambda s: "silenced by <@U0DEPLOYER>" in blocks_text(again.blocks))
    silences = manager.client.get(f"{manager.url}/api/v2/silences").json()
    [silence] = [s for s in silences if s["status"]["state"] == "active"]
    assert silence["createdBy"] == "U0DEPLOYER" and silence["comment"] == "vLLM upgrade soak, OPS-77"
    assert {(m["name"], m["value"]) for m in silence["matchers"]} == {("endpoint", "kimi-prod"),
                                                                      ("kimi_ops_kind", "burn-page:ttft")}
    ends = dt.datetime.fromisoformat(silence["endsAt"].replace("Z", "+00:00"))
    assert dt.timedelta(hours=3, minutes=59) < ends - dt.datetime.now(dt.UTC) <= dt.timedelta(hours=4)

    # Resolved under the silence, Alertmanager tells no one; the watch round finds the alert gone and closes the incident.
    reconciler = Reconciler()
    assert reconciler.reconcile(bench.app.ctx) == [] and reconciler.reconcile(bench.app.ctx) == []  # silenced, held
    fire(manager, resolved=True)
    wait_until("Alertmanager letting the alert go", lambda: not manager.client.get(f"{manager.url}/api/v2/alerts").json())
    assert reconciler.reconcile(bench.app.ctx) == []  # one round without it could be a restarted Alertmanager
    assert reconciler.reconcile(bench.app.ctx) == ["kimi-prod: burn-page:ttft closed (Alertmanager no longer holds its alert)"]
    with bench.app.ctx.uow() as uow:  # closed quietly, as a silenced kind recovers; the next burn can page again
        assert uow.incidents.open_by_endpoint(["burn-page:ttft"]) == {}
        assert [a.actor for a in uow.audit.list(subject="endpoint:kimi-prod") if a.action == "incident.closed"][-1:] == [
            "alertmanager"]


def test_the_webhook_refuses_without_the_token_and_bad_bodies_with_one_line(routed) -> None:
    bench, _ = routed
    url = f"{bench.http.url}/alertmanager/webhook"
    body = {"version": "4", "status": "firing", "alerts": [{"status": "firing", "labels": LABELS, "fingerprint": "f1"}]}
    assert bench.client.post(url, json=body).status_code == 401
    refused = bench.client.post(url, json=body, headers={"Authorization": "Bearer not-the-token-at-all"})
    assert refused.status_code == 401 and "bearer token" in refused.text
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert bench.client.get(url, headers=good).status_code == 405
    for bad in (b"not json", b'{"version": "3", "status": "firing", "alerts": []}', b'{"version": "4"}'):
        answer = bench.client.post(url, content=bad, headers={**good, "Content-Type": "application/json"})
        assert answer.status_code == 400 and answer.text.count("\n") == 1 and "Traceback" not in answer.text
    foreign = {**body, "alerts": [{"status": "firing", "labels": {"alertname": "DiskFull"}, "fingerprint": "f2"}]}
    assert "ignored 1 alert" in bench.client.post(url, json=foreign, headers=good).text
    with bench.app.ctx.uow() as uow:
        assert uow.incidents.open_by_endpoint(["burn-page:ttft"]) == {}
    assert bench.client.post(url, json=body, headers=good).text.startswith("opened kimi-prod burn-page:ttft")
    assert "1 already open" in bench.client.post(url, json=body, headers=good).text  # another Alertmanager's copy


def test_kimi_ops_serve_receives_the_alert_and_pages_once(tmp_path) -> None:
    """The process an operator runs: Alertmanager → ``kimi-ops serve`` → the endpoint's channel, once."""
    import os
    import re
    import signal
    import subprocess
    import sys

    import yaml

    from bot.sandbox.slack_stub import SlackStub

    config = tmp_path / "kimi-ops.yaml"
    config.write_text(yaml.safe_dump({"endpoints": [endpoint_config(channel=CHANNEL, slo={"alerting": "prometheus"})],
                                      "roles": ROLES}))
    with SlackStub() as stub:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_"))}
        env.update(KIMI_DATA_DIR=str(tmp_path / "data"), KIMI_AUTO_MIGRATE="1", KIMI_CONFIG=str(config),
                   SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="s3cret", KIMI_SLACK_API_URL=stub.api_url,
                   KIMI_ALERTMANAGER_WEBHOOK_TOKEN=TOKEN)
        serve = subprocess.Popen([sys.executable, "-c", "from bot.cli.main import main; main()", "serve", "--host",
                                  "127.0.0.1", "--port", "0", "--no-jobs"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
        manager = None
        try:
            found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", serve.stdout.readline() if serve.stdout else "")
            assert found, "kimi-ops serve did not start"
            manager = Alertmanager(tmp_path, f"{found.group(1)}/alertmanager/webhook", TOKEN)
            wait_until("Alertmanager ready", manager.ready, timeout=30)
            fire(manager)
            wait_until("the page from kimi-ops serve", lambda: pages(stub), timeout=30)
            sent = manager.notifications()
            wait_until("Alertmanager repeating the group", lambda: manager.notifications() >= sent + 3,
                       timeout=30, poll=0.2)
            [page] = pages(stub)
            assert page.channel == CHANNEL and button(page, INCIDENT_SILENCE)
        finally:
            if manager is not None:
                manager.stop()
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=60)
        assert serve.returncode == 0


def test_after_a_go_live_the_page_follows_the_relabelled_alert_and_neither_recovers_nor_repeats(routed) -> None:
    bench, _ = routed
    url, good = f"{bench.http.url}/alertmanager/webhook", {"Authorization": f"Bearer {TOKEN}"}

    def alert(status: str, fingerprint: str, release: str) -> dict:
        return {"status": status, "labels": {**LABELS, "release": release}, "annotations": ANNOTATIONS,
                "fingerprint": fingerprint}

    def notify(*alerts: dict) -> str:
        status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
        return bench.client.post(url, json={"version": "4", "status": status, "alerts": list(alerts)}, headers=good).text

    assert notify(alert("firing", "fp-rel-b", "rel-b")).startswith("opened")
    [page] = wait_until("the page", lambda: pages(bench.stub))
    # The rules were applied again with rel-c live: Prometheus resolves the old alert and fires the new one.
    assert "closed" not in notify(alert("resolved", "fp-rel-b", "rel-b"), alert("firing", "fp-rel-c", "rel-c"))
    assert "recovered" not in blocks_text(page.blocks) and len(pages(bench.stub)) == 1
    assert notify(alert("resolved", "fp-rel-c", "rel-c")).startswith("closed kimi-prod burn-page:ttft")
    wait_until("the page edited as recovered", lambda: "recovered" in blocks_text(page.blocks))
