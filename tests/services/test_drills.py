"""Availability drills against the sandbox: each kind injected through the cluster adapter, seen, lifted, recovered.

One module-scoped world: the sandbox's stand-ins (Kubernetes emulator with the operator simulator playing
the controller, moto, the capacity stand-in, the local model server following the pods) on a clock that
moves by each drill's look, so a deleted pod's two minutes back cost a fraction of a second. The endpoint
is made live by applying the example release's rendered manifest and recording it, as a finished deploy
leaves it. Each test passes alone and in any order: a test about the drill history first clears the endpoint's
record (:func:`no_drill_on_record`) and makes the history it reads.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import delete
from typer.testing import CliRunner

from bot.adapters.clock import FrozenClock
from bot.adapters.store.models import Deployment, Drill
from bot.bootstrap import build_root
from bot.cli.main import app
from bot.sandbox.stack import ADMIN, APPROVER_1, DEPLOYER, ENDPOINT, Sandbox
from bot.services.access import Identity
from bot.services.admission import override_admission
from bot.services.drills import DrillView, decide_drill, list_drills, request_drill, run_drill
from bot.services.errors import Forbidden, Refused
from bot.services.gates import GateSubject, infrastructure_report
from bot.services.reservations import watch_reservations
from bot.views.parts import Table
from commands.base import Usage
from commands.registry import dispatch, parse
from tests.conftest import START

REQUESTER, APPROVER = Identity(DEPLOYER), Identity(APPROVER_1)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    clock = FrozenClock(START)
    sandbox = Sandbox(tmp_path_factory.mktemp("drills"), clock=clock, traffic=False, drills=True,
                      settings_overrides={"drill_poll_seconds": 15, "drill_timeout_minutes": 30}).start()
    try:
        _go_live(sandbox)
        watch_reservations(sandbox.ctx)  # the reservation the capacity stand-in holds, stored as the watch stores it
        override_admission(sandbox.ctx, ENDPOINT, "close", "drills", Identity(ADMIN))
        yield sandbox
    finally:
        sandbox.stop()


@pytest.fixture
def no_drill_on_record(world: Sandbox) -> Sandbox:
    """The endpoint as before its first drill: the drills earlier tests ran (or left asked) are off its record."""
    with world.ctx.uow() as uow:
        row = uow.endpoints.get(ENDPOINT)
        uow.session.execute(delete(Drill).where(Drill.endpoint_id == row.id))
        uow.commit()
    return world


def _go_live(sandbox: Sandbox) -> None:
    """Apply the example release on the emulator, wait for its ready pod, record it live with its manifest."""
    ctx, spec, release = sandbox.ctx, sandbox.endpoint, sandbox.releases[0]
    with ctx.uow() as uow:
        row, rel = uow.endpoints.get(ENDPOINT), uow.releases.get(release.name)
        assert row is not None and rel is not None
        endpoint_id, release_id, tuple_hash = row.id, rel.id, rel.tuple_hash
    manifest = ctx.ports.cluster.render(release, spec, tuple_hash)
    ctx.ports.cluster.apply(spec, manifest)
    deadline = time.monotonic() + 15
    while not _ready(sandbox) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _ready(sandbox), "the operator simulator never made the model pod ready"
    now = ctx.clock.now()
    with ctx.uow() as uow:
        live = uow.deployments.add(Deployment(endpoint_id=endpoint_id, release_id=release_id, kind="deploy", state="live",
                                              requested_by=DEPLOYER, created_at=now, updated_at=now, finished_at=now,
                                              applied_manifest=manifest.text, manifest_hash=manifest.sha256))
        assert live.in_flight is None  # live: it holds nothing (the row takes in_flight from its state)
        uow.commit()


def _ready(sandbox: Sandbox) -> bool:
    health = sandbox.ctx.ports.cluster.health(sandbox.endpoint)
    return health is not None and any(p.ready for p in health.pods)


def drill(world: Sandbox, kind: str) -> DrillView:
    """Ask, approve (someone else), run."""
    asked = request_drill(world.ctx, REQUESTER, ENDPOINT, kind)
    decide_drill(world.ctx, APPROVER, asked.id, approve=True)
    return run_drill(world.ctx, asked.id)


def audit(world: Sandbox) -> list[tuple[str, dict[str, Any]]]:
    with world.ctx.uow() as uow:
        rows = sorted(uow.audit.list(subject=f"endpoint:{ENDPOINT}"), key=lambda a: a.id)  # oldest first
        return [(a.action, dict(a.details or {})) for a in rows if a.action.startswith("drill.")]


def infra_check(world: Sandbox) -> tuple[str, str]:
    subject = GateSubject(deployment_id=0, kind="deploy", endpoint=world.endpoint, release=world.releases[0],
                          release_hash="-", manifest_hash=None, baseline_reports={})
    report = infrastructure_report(world.ctx, subject, world.ctx.clock.now())
    [check] = [c for c in report.checks if c.name == "drills.recent"]
    return check.status, check.reason


def test_the_infrastructure_gate_warns_while_no_drill_has_passed(no_drill_on_record: Sandbox) -> None:
    status, reason = infra_check(no_drill_on_record)
    assert status == "warn" and "no availability drill has passed" in reason and "every 30 days" in reason


def test_refused_while_users_are_admitted_unless_the_impact_is_accepted(world) -> None:
    override_admission(world.ctx, ENDPOINT, "open", "users back", Identity(ADMIN))
    try:
        with pytest.raises(Refused, match=r"users are admitted to kimi-prod \(open\).*accept-user-impact"):
            request_drill(world.ctx, REQUESTER, ENDPOINT, "pod-deletion")
        asked = request_drill(world.ctx, REQUESTER, ENDPOINT, "pod-deletion", accept_user_impact=True)
        assert asked.state == "waiting" and asked.accept_user_impact
        with pytest.raises(Refused, match="already waiting"):
            request_drill(world.ctx, REQUESTER, ENDPOINT, "node-loss", accept_user_impact=True)
        with pytest.raises(Refused, match="needs a reason"):
            decide_drill(world.ctx, APPROVER, asked.id, approve=False)
        rejected = decide_drill(world.ctx, APPROVER, asked.id, approve=False, reason="launch week")
        assert rejected.state == "rejected" and rejected.reason == "launch week"
    finally:
        override_admission(world.ctx, ENDPOINT, "close", "drills", Identity(ADMIN))
    assert [a for a, _ in audit(world)][-2:] == ["drill.requested", "drill.rejected"]


def test_the_requester_cannot_approve_and_a_viewer_cannot_ask(world) -> None:
    with pytest.raises(Forbidden, match="to ask for availability drills"):
        request_drill(world.ctx, Identity("U0NOBODY"), ENDPOINT, "pod-deletion")
    with pytest.raises(Refused, match="no drill kind 'pod-delete'; did you mean `pod-deletion`"):
        request_drill(world.ctx, REQUESTER, ENDPOINT, "pod-delete")
    asked = request_drill(world.ctx, REQUESTER, ENDPOINT, "pod-deletion")
    with pytest.raises(Refused, match="someone else must approve"):
        decide_drill(world.ctx, REQUESTER, asked.id, approve=True)  # U0DEPLOYER is an approver too
    with pytest.raises(Forbidden, match="approve or reject availability drills"):
        decide_drill(world.ctx, Identity("U0NOBODY"), asked.id, approve=True)
    assert run_drill(world.ctx, asked.id).state == "waiting"  # nothing runs before an approval
    decide_drill(world.ctx, APPROVER, asked.id, approve=False, reason="asked twice")


def test_pod_deletion_is_detected_paged_and_recovered_by_the_controller(world) -> None:
    """Through Slack's commands: asked, approved by someone else, run as the approval's follow-up."""
    root = build_root(world.ctx)
    asked = dispatch(root, REQUESTER, "drill KIMI-PROD pod-deletion")
    number = int(asked.text.split("#")[1].split()[0])
    assert "waits for an approver other than you" in asked.text and f"/kimi drill approve {number}" in asked.text
    approved = dispatch(root, APPROVER, f"drill approve {number}")
    assert "approved; it runs now" in approved.text and approved.then is not None
    ended = approved.then()
    assert ended is not None and ended.text.startswith(f"drill #{number} pod-deletion on kimi-prod: passed")
    [result] = [d for d in list_drills(world.ctx, APPROVER, ENDPOINT) if d.id == number]
    assert result.state == "passed", result.reason
    assert result.detection_seconds == 0  # the first look after the deletion sees no pod
    assert result.recovery_seconds is not None and 120 <= result.recovery_seconds <= 300  # the pod's two minutes back
    assert result.alerts == ["readiness"]  # three failed completions in a row page, as the probe's rule says
    with world.ctx.uow() as uow:
        row = uow.endpoints.get(ENDPOINT)
        assert not uow.incidents.open_of(row.id, ["readiness", "crashloop", "node"])  # the page recovered too
        pages = [e.payload["incident"] for e in uow.events.undelivered(limit=10_000) if e.kind == "watch.alert"]
    assert pages.count("readiness") >= 1
    actions = [a for a, _ in audit(world)]
    assert actions[-4:] == ["drill.requested", "drill.approved", "drill.started", "drill.ended"]


def test_node_loss_is_lifted_once_it_paged_and_recovers_on_the_node(world, monkeypatch) -> None:
    """Through the CLI: ``kimi-ops drill ENDPOINT KIND``, then ``kimi-ops drill approve N`` runs it here."""
    monkeypatch.setattr("bot.cli.common.context", lambda: world.ctx)
    asked = CliRunner().invoke(app, ["drill", ENDPOINT, "node-loss", "--as", DEPLOYER])
    assert asked.exit_code == 0, asked.output
    number = int(asked.output.split("#")[1].split()[0])
    assert f"`kimi-ops drill approve {number}` or `kimi-ops drill reject {number} --reason REASON`" in asked.output
    mine = CliRunner().invoke(app, ["drill", "approve", str(number), "--as", DEPLOYER])
    assert mine.exit_code == 1 and "someone else must approve" in mine.output
    ran = CliRunner().invoke(app, ["drill", "approve", str(number), "--as", APPROVER_1])
    assert ran.exit_code == 0, ran.output
    assert f"drill #{number} node-loss on kimi-prod: passed" in ran.output
    [result] = [d for d in list_drills(world.ctx, APPROVER, ENDPOINT) if d.id == number]
    assert result.state == "passed", result.reason
    assert result.detection_seconds == 0 and result.alerts == ["readiness"]
    assert result.recovery_seconds is not None and result.recovery_seconds > 30  # not before the page made someone act
    nodes = [n for n in world.stand_ins["kube"].rest().items("/api/v1/nodes")]
    assert not any((n.get("spec") or {}).get("unschedulable") for n in nodes)  # uncordoned
    assert "drill.lifted" in [a for a, _ in audit(world)][-3:]


@pytest.mark.parametrize("kind", ["model-load-failure", "artifact-outage"])
def test_a_model_that_cannot_load_crash_loops_pages_and_the_stored_manifest_recovers(world, kind: str) -> None:
    result = drill(world, kind)
    assert result.state == "passed", result.reason
    assert "crashloop" in result.alerts and result.detection_seconds is not None
    assert result.recovery_seconds is not None and result.recovery_seconds >= result.detection_seconds
    with world.ctx.uow() as uow:
        row = uow.endpoints.get(ENDPOINT)
        details = uow.drills.get(result.id).details
    assert any("re-applied the stored live manifest" in n for n in details["notes"])
    assert any("crash-looping" in f for f in details["faults_seen"])
    obj = world.stand_ins["kube"].rest().get(
        f"/apis/inference.sagemaker.aws.amazon.com/v1/namespaces/{world.endpoint.namespace}/inferenceendpointconfigs/{ENDPOINT}")
    assert "kimi-ops.io/drill" not in (obj["metadata"].get("annotations") or {})  # the live release runs again
    assert row is not None


def test_a_bad_release_answers_under_another_name_and_is_rolled_back(world) -> None:
    result = drill(world, "bad-release")
    assert result.state == "passed", result.reason
    assert result.alerts == ["readiness"]
    with world.ctx.uow() as uow:
        faults = uow.drills.get(result.id).details["faults_seen"]
    assert any("does not answer" in f for f in faults)


def test_reservation_expiry_is_rehearsed_on_the_watchs_clock_and_keeps_nothing(world) -> None:
    with world.ctx.uow() as uow:
        before = [(r.id, list(r.alerts_sent or [])) for r in uow.reservations.list()]
        escalations = sum(1 for e in uow.events.undelivered(limit=10_000) if e.kind == "reservation.escalation")
    result = drill(world, "reservation-expiry")
    # One endpoint, no tested replacement: the watch pages an hour before the end, and nothing takes over.
    assert result.state == "failed" and result.alerts == ["reservation.escalation"]
    assert result.detection_seconds == 0 and result.recovery_seconds is None
    assert "no tested endpoint takes over" in (result.reason or "")
    with world.ctx.uow() as uow:
        assert [(r.id, list(r.alerts_sent or [])) for r in uow.reservations.list()] == before
        assert sum(1 for e in uow.events.undelivered(limit=10_000) if e.kind == "reservation.escalation") == escalations


def test_a_drill_whose_runner_stopped_is_ended_as_abandoned_by_the_next_request(world) -> None:
    asked = request_drill(world.ctx, REQUESTER, ENDPOINT, "pod-deletion")
    decide_drill(world.ctx, APPROVER, asked.id, approve=True)  # approved, then the process that runs it dies
    with pytest.raises(Refused, match=f"drill #{asked.id} \\(pod-deletion\\) is already running"):
        request_drill(world.ctx, REQUESTER, ENDPOINT, "node-loss")
    world.ctx.clock.advance(dt.timedelta(minutes=41))  # past the 30-minute limit and ten more
    again = request_drill(world.ctx, REQUESTER, ENDPOINT, "node-loss")
    [old] = [d for d in list_drills(world.ctx, APPROVER, ENDPOINT) if d.id == asked.id]
    assert old.state == "failed" and "abandoned" in (old.reason or "")
    decide_drill(world.ctx, APPROVER, again.id, approve=False, reason="only testing the abandoned one")


def test_wrong_drill_commands_say_what_is_wrong(world) -> None:
    with pytest.raises(Usage, match="no drill kind `pod-delete`; did you mean `pod-deletion`"):
        parse("drill kimi-prod pod-delete")
    with pytest.raises(Usage, match="`now` is not `accept-user-impact`"):
        parse("drill kimi-prod node-loss now")
    with pytest.raises(Usage, match="say why the drill is rejected"):
        parse("drill reject 4")
    wrong = CliRunner().invoke(app, ["drill", ENDPOINT, "pod-delete", "--as", DEPLOYER])
    assert wrong.exit_code == 2 and "did you mean `pod-deletion`" in wrong.output


def _history(world: Sandbox) -> None:
    """Nine drills, oldest first: five asked and rejected, a bad release that passed, a reservation expiry that
    failed, a pod deletion whose runner stopped (abandoned by the next request, a node loss, then rejected)."""
    for kind in ("pod-deletion", "pod-deletion", "node-loss", "model-load-failure", "artifact-outage"):
        asked = request_drill(world.ctx, REQUESTER, ENDPOINT, kind)
        decide_drill(world.ctx, APPROVER, asked.id, approve=False, reason="not this week")
    assert drill(world, "bad-release").state == "passed"
    assert drill(world, "reservation-expiry").state == "failed"
    stopped = request_drill(world.ctx, REQUESTER, ENDPOINT, "pod-deletion")
    decide_drill(world.ctx, APPROVER, stopped.id, approve=True)
    world.ctx.clock.advance(dt.timedelta(minutes=41))
    last = request_drill(world.ctx, REQUESTER, ENDPOINT, "node-loss")
    decide_drill(world.ctx, APPROVER, last.id, approve=False, reason="enough for today")


def test_the_last_drills_are_listed_and_the_gate_warning_follows_the_period(no_drill_on_record: Sandbox,
                                                                            monkeypatch) -> None:
    world = no_drill_on_record
    _history(world)
    drills = list_drills(world.ctx, APPROVER, ENDPOINT)
    assert [d.kind for d in drills][:9] == ["node-loss", "pod-deletion", "reservation-expiry", "bad-release",
                                            "artifact-outage", "model-load-failure", "node-loss", "pod-deletion",
                                            "pod-deletion"]
    assert drills[3].line.startswith("drill #") and "passed (detected after" in drills[3].line

    listed = dispatch(build_root(world.ctx), APPROVER, "drills kimi-prod 4")
    [table] = [p for p in listed.parts if isinstance(p, Table)]
    assert "last availability drills" in listed.text and "reservation-expiry" in table.text and "abandoned" not in table.text
    assert "bad-release" in table.text and "artifact-outage" not in table.text  # the last four
    monkeypatch.setattr("bot.cli.common.context", lambda: world.ctx)
    shown = CliRunner().invoke(app, ["drills", ENDPOINT, "-o", "json", "--as", APPROVER_1])
    assert shown.exit_code == 0, shown.output
    rows = json.loads(shown.output)
    assert rows[2]["kind"] == "reservation-expiry" and rows[2]["state"] == "failed"
    assert rows[3]["passed"] is True and rows[3]["recovery_seconds"] >= rows[3]["detection_seconds"]
    assert rows[3]["requested_at"].endswith("Z") and rows[0]["state"] == "rejected"
    table = CliRunner().invoke(app, ["drills", ENDPOINT, "--as", APPROVER_1])
    assert table.exit_code == 0 and "RECOVERED" in table.output.upper()

    assert infra_check(world)[0] == "pass"
    now = world.ctx.clock.now()
    world.ctx.clock.advance(dt.timedelta(days=31))
    try:
        status, reason = infra_check(world)
    finally:
        world.ctx.clock.set(now)  # a month later, asked of the gate only: the reservation still holds for the others
    assert status == "warn" and "passed 31 days ago" in reason
