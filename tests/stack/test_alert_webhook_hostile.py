"""Hostile and careless requests to ``/alertmanager/webhook`` over HTTP into the running app, on both databases.

Each row of :data:`REFUSED` is a body a broken or hostile sender posts with the right token: one short line, a
4xx (never a 500 or a 503 that makes Alertmanager retry a body that can never be taken), nothing changed. Each row
of :data:`IGNORED` is a well-formed notification whose alerts name nothing kimi-ops can page for: 200, one line
saying so, nothing opened. The token never shows in an answer, a log line, the database or Slack.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from bot.adapters.alertmanager import HttpAlertmanager
from bot.views.actions import INCIDENT_SILENCE
from tests.jobs_support import make_live
from tests.promtool_support import free_port
from tests.slack_support import CHANNEL, SlackBench, blocks_text, button, start_bench, stop_bench
from tests.workflow_support import ROLES, endpoint_config, fake_ports
from tests.world_support import wait_until

TOKEN = "am-webhook-token-hostile-0123456789"
LABELS = {"alertname": "KimiOpsErrorBudgetBurn", "endpoint": "kimi-prod", "severity": "page",
          "kimi_ops_kind": "burn-page:ttft", "release": "rel-b"}
GOOD = {"Authorization": f"Bearer {TOKEN}"}


def notification(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {"version": "4", "status": "firing", "groupKey": "{}:{}", "alerts": list(alerts)}


def alert(labels: dict[str, str] | None = None, fingerprint: str = "a1b2c3d4e5f60718", **extra: Any) -> dict[str, Any]:
    return {"status": "firing", "labels": LABELS if labels is None else labels, "fingerprint": fingerprint, **extra}


def watched_bench(make_ctx: Any) -> SlackBench:
    """The app serving HTTP, ``kimi-prod`` live with ``rel-b`` and paged by Alertmanager, which is down."""
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: Alertmanager is down
    ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL, slo={"alerting": "prometheus"})], roles=ROLES,
                   ports=replace(fake_ports(), silences=HttpAlertmanager(down)), alertmanager_url=down,
                   alertmanager_webhook_token=TOKEN)
    make_live(ctx, "kimi-prod", "rel-b")
    return start_bench(ctx)


@pytest.fixture()
def bench(make_ctx: Any) -> Iterator[SlackBench]:
    with watched_bench(make_ctx) as b:
        yield b


@pytest.fixture(scope="module")
def shared_bench(make_module_ctx: Any) -> Iterator[SlackBench]:
    """One bench a database for the two tables below: each row must change nothing (each test says so), so each finds
    the bench as it was started."""
    with watched_bench(make_module_ctx) as b:
        yield b


def post(bench: SlackBench, body: bytes | str, headers: dict[str, str] | None = None) -> httpx.Response:
    raw = body.encode() if isinstance(body, str) else body
    return bench.client.post(f"{bench.http.url}/alertmanager/webhook", content=raw, timeout=60,
                             headers={"Content-Type": "application/json", **(GOOD if headers is None else headers)})


def open_incidents(bench: SlackBench) -> list[tuple[str, Any]]:
    """Each open incident's reason and how long it is silenced."""
    with bench.app.ctx.uow() as uow:
        return [(i.reason, i.silenced_until) for incidents in uow.incidents.open_by_endpoint(["burn-page:ttft"]).values()
                for i in incidents]


REFUSED: list[tuple[str, bytes | str, dict[str, str] | None, int, str]] = [
    ("no token", json.dumps(notification(alert())), {}, 401, "bearer token"),
    ("basic auth", json.dumps(notification(alert())), {"Authorization": f"Basic {TOKEN}"}, 401, "bearer token"),
    ("token with a suffix", json.dumps(notification(alert())), {"Authorization": f"Bearer {TOKEN}x"}, 401, "bearer"),
    ("token prefix only", json.dumps(notification(alert())), {"Authorization": f"Bearer {TOKEN[:16]}"}, 401, "bearer"),
    ("empty bearer", json.dumps(notification(alert())), {"Authorization": "Bearer"}, 401, "bearer token"),
    ("deeply nested JSON", "[" * 200_000 + "]" * 200_000, None, 400, "not an Alertmanager version-4 notification"),
    ("nested inside a label", '{"version": "4", "status": "firing", "alerts": [{"labels": ' + "[" * 100_000
     + "]" * 100_000 + "}]}", None, 400, "not an Alertmanager version-4 notification"),
    ("invalid UTF-8", b'{"version": "4", "status": "firing", "alerts": [], "receiver": "\xff\xfe"}', None, 400,
     "not an Alertmanager version-4 notification"),
    ("a JSON list", "[]", None, 400, "not an Alertmanager version-4 notification"),
    ("a JSON string", '"4"', None, 400, "not an Alertmanager version-4 notification"),
    ("version 4 as a number", json.dumps({**notification(alert()), "version": 4}), None, 400, "version"),
    ("alerts not a list", json.dumps({**notification(), "alerts": {"a": 1}}), None, 400, "alerts"),
    ("a label that is a number", json.dumps(notification(alert({**LABELS, "severity": 5}))), None, 400, "labels"),
    ("no fingerprint", json.dumps(notification({"status": "firing", "labels": LABELS})), None, 400, "fingerprint"),
    ("fingerprint of 100 characters", json.dumps(notification(alert(fingerprint="f" * 100))), None, 400, "fingerprint"),
    ("status unknown", json.dumps(notification(alert(status="pending"))), None, 400, "status"),
    ("just over a megabyte", json.dumps(notification(alert(annotations={"x": "y" * (1024 * 1024)}))), None, 413,
     "at most"),
]


@pytest.mark.parametrize(("body", "headers", "status", "says"),
                         [pytest.param(b, h, s, w, id=i) for i, b, h, s, w in REFUSED])
def test_a_bad_request_is_refused_in_one_line_and_changes_nothing(shared_bench: SlackBench, body: bytes | str,
                                                                   headers: dict[str, str] | None, status: int,
                                                                   says: str) -> None:
    bench = shared_bench
    answer = post(bench, body, headers)
    assert answer.status_code == status, answer.text
    assert says in answer.text and answer.text.count("\n") == 1 and "Traceback" not in answer.text
    assert TOKEN not in answer.text
    assert open_incidents(bench) == []


IGNORED: list[tuple[str, dict[str, Any], str]] = [
    ("no labels at all", notification({"status": "firing", "fingerprint": "a1"}), "ignored 1 alert"),
    ("no endpoint label", notification(alert({k: v for k, v in LABELS.items() if k != "endpoint"})), "ignored 1 alert"),
    ("no kind label", notification(alert({k: v for k, v in LABELS.items() if k != "kimi_ops_kind"})), "ignored 1 alert"),
    ("a kind kimi-ops never raises", notification(alert({**LABELS, "kimi_ops_kind": "coffee"})), "ignored 1 alert"),
    ("an unknown endpoint", notification(alert({**LABELS, "endpoint": "kimi-nowhere"})), "unknown endpoint kimi-nowhere"),
    ("an endpoint label of 500 KB", notification(alert({**LABELS, "endpoint": "k" * 500_000})), "unknown endpoint"),
    ("NUL in the endpoint label", notification(alert({**LABELS, "endpoint": "kimi-prod\x00"})), "unknown endpoint"),
    ("no alerts", notification(), "nothing to do"),
    ("2,000 alerts for 2,000 unknown endpoints", notification(*[alert({**LABELS, "endpoint": f"kimi-{i}"}, f"f{i:x}")
                                                                for i in range(2000)]), "and 1995 more"),
]


@pytest.mark.parametrize(("body", "says"), [pytest.param(b, s, id=i) for i, b, s in IGNORED])
def test_alerts_naming_nothing_kimi_ops_pages_for_are_ignored_out_loud(shared_bench: SlackBench, body: dict[str, Any],
                                                                       says: str) -> None:
    bench = shared_bench
    answer = post(bench, json.dumps(body))
    assert answer.status_code == 200 and says in answer.text, answer.text
    assert answer.text.count("\n") == 1 and len(answer.text) < 400
    assert open_incidents(bench) == []


def test_control_characters_in_the_alert_are_paged_without_them(bench: SlackBench) -> None:
    """NUL in an annotation or fingerprint must not make the database refuse it forever (a 503 retried for ever)."""
    body = notification(alert(annotations={"description": "burning\x00 fast\x07 <!channel>"}))
    answer = post(bench, json.dumps(body))
    assert answer.status_code == 200 and answer.text.startswith("opened kimi-prod burn-page:ttft"), answer.text
    [(reason, _)] = open_incidents(bench)
    assert "\x00" not in reason and "burning fast" in reason
    assert post(bench, json.dumps(notification(alert(fingerprint="a1\x00")))).status_code in (200, 400)


def test_duplicate_deliveries_open_one_incident(bench: SlackBench) -> None:
    body = json.dumps(notification(alert()))
    said = [post(bench, body).text for _ in range(4)]
    assert said[0].startswith("opened") and all("1 already open" in s for s in said[1:])
    assert len(open_incidents(bench)) == 1


def test_silence_with_alertmanager_down_says_so_and_silences_nothing(bench: SlackBench) -> None:
    assert post(bench, json.dumps(notification(alert()))).status_code == 200
    [page] = bench.stub.wait_for(lambda s: [m for m in s.messages if m.thread_ts is None and m.ephemeral_to is None
                                            and "burn-page:ttft" in blocks_text(m.blocks)])
    assert button(page, INCIDENT_SILENCE)
    bench.click("U0DEPLOYER", page, INCIDENT_SILENCE)
    view = bench.stub.wait_for(lambda s: s.calls_to("views.open"))[-1].params["view"]
    answer = bench.post(bench.sender.submit("U0DEPLOYER", view, {"reason": {"reason": "upgrade soak, OPS-77"},
                                                                 "hours": {"hours": "4"}}))
    assert answer.status_code == 200
    told = bench.stub.wait_for(lambda s: [m for m in s.messages if "Alertmanager did not create the silence" in m.text
                                          or "Alertmanager did not create the silence" in blocks_text(m.blocks)])
    assert "Traceback" not in told[0].text
    [(_, silenced_until)] = open_incidents(bench)
    assert silenced_until is None
    with bench.app.ctx.uow() as uow:
        assert not [a for a in uow.audit.list(subject="endpoint:kimi-prod") if a.action == "incident.silenced"]


def test_the_token_is_never_logged_stored_or_posted(bench: SlackBench, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    post(bench, json.dumps(notification(alert())))
    post(bench, json.dumps(notification(alert())), {"Authorization": f"Bearer {TOKEN}-wrong"})
    post(bench, "{oops")
    post(bench, json.dumps(notification(alert(status="resolved"))))
    assert bench.app.wait_idle(30)
    assert TOKEN not in caplog.text
    assert not [c for c in bench.stub.calls if TOKEN in json.dumps(c.params, default=str)]
    engine = create_engine(bench.app.ctx.settings.effective_database_url)
    try:
        with engine.connect() as db:
            tables = [r[0] for r in db.execute(text(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
                if engine.dialect.name == "postgresql" else "SELECT name FROM sqlite_master WHERE type = 'table'"))]
            for table in tables:
                rows = db.execute(text(f'SELECT * FROM "{table}"')).fetchall()
                assert TOKEN not in repr(rows), table
    finally:
        engine.dispose()


def test_simultaneous_deliveries_open_one_incident_and_post_one_page(bench: SlackBench) -> None:
    """Every member of an Alertmanager cluster sends the group at once: one incident, one page, every answer a 200."""
    from concurrent.futures import ThreadPoolExecutor

    body = json.dumps(notification(alert()))
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: post(bench, body), range(8)))
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
    assert sum(a.text.startswith("opened") for a in answers) == 1
    assert len(open_incidents(bench)) == 1
    def pages() -> list[Any]:
        return [m for m in bench.stub.messages if m.thread_ts is None and m.ephemeral_to is None
                and "burn-page:ttft" in blocks_text(m.blocks)]

    assert bench.app.wait_idle(30)
    bench.app.deliver()
    # A delivery already claimed by the app's own outbox pass may post just after ours returns: wait for the page,
    # then pass the outbox once more; a second page would come from it.
    bench.stub.wait_for(lambda _stub: len(pages()) >= 1, timeout=60)
    bench.app.deliver()
    assert len(pages()) == 1


# Replicas share a PostgreSQL database (DESIGN.md, "Several replicas"): SQLite serves one process.
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_two_replicas_each_sent_the_group_at_once_open_one_incident_and_post_one_page(make_ctx: Any) -> None:
    """Two kimi-ops replicas on one database, each an Alertmanager cluster member's receiver: the fingerprint's one
    incident across both, one page across both (each replica posting to Slack through its own connection)."""
    from concurrent.futures import ThreadPoolExecutor

    down = f"http://127.0.0.1:{free_port()}"

    def replica() -> SlackBench:
        ctx = make_ctx(endpoints=[endpoint_config(channel=CHANNEL, slo={"alerting": "prometheus"})], roles=ROLES,
                       ports=replace(fake_ports(), silences=HttpAlertmanager(down)), alertmanager_url=down,
                       alertmanager_webhook_token=TOKEN)
        return start_bench(ctx)

    first = replica()
    make_live(first.app.ctx, "kimi-prod", "rel-b")
    second = replica()
    try:
        body = json.dumps(notification(alert()))
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda n: post((first, second)[n % 2], body), range(8)))
        assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
        assert sum(a.text.startswith("opened") for a in answers) == 1
        assert len(open_incidents(first)) == 1 and len(open_incidents(second)) == 1

        def pages() -> list[Any]:
            return [m for bench in (first, second) for m in bench.stub.messages
                    if m.thread_ts is None and m.ephemeral_to is None and "burn-page:ttft" in blocks_text(m.blocks)]

        for bench in (first, second):
            assert bench.app.wait_idle(30)
        # Either replica may post it, each to its own stub: a wait on one stub's changes would sleep out its bound
        # whenever the other one posted (60 s in a CI run).
        wait_until("the page from either replica", lambda: len(pages()) >= 1, timeout=60, poll=0.05)
        for bench in (first, second):  # each replica's outbox pass once more: a second page would come from one
            bench.app.deliver()
        assert len(pages()) == 1
    finally:
        stop_bench(second)
        stop_bench(first)


def test_an_endpoint_kimi_ops_watches_itself_is_not_paged_by_alertmanager_but_its_page_still_closes(
        bench: SlackBench) -> None:
    """After a switch to slo.alerting: builtin, a rule left in Prometheus must not reopen pages the built-in watch
    closes (at every Alertmanager repeat); the resolution of a page Alertmanager opened before the switch still closes it."""
    assert post(bench, json.dumps(notification(alert()))).text.startswith("opened")
    ctx = bench.app.ctx
    [spec] = ctx.settings.endpoints
    ctx.settings.endpoints = [spec.model_copy(update={"slo": spec.slo.model_copy(update={"alerting": "builtin"})})]
    assert "1 already open" not in post(bench, json.dumps(notification(alert()))).text
    resolved = post(bench, json.dumps(notification(alert(status="resolved"))))
    assert resolved.text.startswith("closed kimi-prod burn-page:ttft"), resolved.text
    answer = post(bench, json.dumps(notification(alert())))
    assert answer.status_code == 200 and "slo.alerting is builtin" in answer.text, answer.text
    assert open_incidents(bench) == []
