"""Blue/green on the sandbox's real parts: a service of two endpoints behind one route, ramped step by step.

One module-scoped pair world (two Kimi K3 stand-ins, one per side, the gateway stand-in splitting the
service's HTTPRoute by weight, background users, the production engine; :mod:`tests.pairs_support`) carries
every case. No test counts on another having run: each reads which side users are on, and one that needs a
side to roll back to asks for it (the ``warm_pair`` fixture deploys to the service only when no side is kept
warm). The deploy through the gates is the one whole-stack flow; the split, the abort, the rollback and the
crash reuse it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from slack_sdk import WebClient

from bot.adapters.slack.notifier import SlackNotifier
from bot.bootstrap import Root
from bot.domain.admission import Admission
from bot.domain.alert_rules import rule_object_name
from bot.sandbox.slack_stub import SlackStub
from bot.sandbox.stack import BLUE, DEPLOYER, GREEN, SANDBOX_PAIR_RAMP, SERVICE, Sandbox
from bot.services.access import Identity
from bot.services.admission import apply_admission
from bot.services.alert_rules import apply_after_go_live
from bot.services.deployments import get_deployment, request_deploy
from bot.services.engine import Engine
from bot.services.errors import Refused
from bot.services.incidents import Incidents
from bot.services.pairs import rollback_service, service_status
from bot.services.ramp_approvals import approve_ramp_step, ramp_step_waiting
from bot.services.reservations import watch_reservations
from bot.services.scheduling import run_job
from commands import incidents
from tests.cli_support import QUICK_SWEEP, QUICK_SWEEP_METRICS_SECONDS, run_in_process
from tests.pairs_support import HTTP, PairWorld, models_seen
from tests.world_support import APPROVER, in_background, joined, wait_until

pytestmark = pytest.mark.timeout(600)

# The Gateway API conformance suite's weight check (HTTPRouteWeight): 500 requests, each share within ±0.05, in
# one of 10 tries.
CONFORMANCE_REQUESTS, CONFORMANCE_TOLERANCE, CONFORMANCE_TRIES = 500, 0.05, 10


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PairWorld]:
    # Most tests here only need a ramp to walk its steps, so its soaks are short; the ones about what a soak sees
    # (or stopping during one) soak as long as the sandbox does (:meth:`endpoint_changed`). Prometheus pages for both
    # sides (no test here runs the metrics watch): the service's own rules follow each go-live and rollback.
    sandbox = Sandbox(tmp_path_factory.mktemp("pair") / "sandbox", pair=True, users_per_second=8.0,
                      settings_overrides={"traffic_sweep": QUICK_SWEEP},  # no test here reads the sweep
                      sweep_metrics_seconds=QUICK_SWEEP_METRICS_SECONDS,
                      endpoint_overrides={"ttft_objective_ms": 1000, "slo": {"alerting": "prometheus"}},
                      service_overrides={"ramp": {**SANDBOX_PAIR_RAMP, "soak_seconds": 0.3, "sample_seconds": 0.3}}).start()
    slack = SlackStub().start()
    w = PairWorld(sandbox=sandbox, engine=Engine(sandbox.ctx, readiness_pause=0.2), slack=slack)
    try:
        watch_reservations(sandbox.ctx)
        w.deploy(w.releases[0])  # the first deploy goes to the first side: users start on BLUE with the older release
        yield w
    finally:
        sandbox.stop()
        slack.stop()
        HTTP.close()


@pytest.fixture
def warm_pair(world: PairWorld) -> PairWorld:
    """The pair with users on one side and the other kept warm (a release that passed its gates, not the users')."""
    world.keep_a_side_warm()
    return world


def test_a_deploy_to_a_service_goes_to_the_idle_side_and_shifts_the_weight_in_steps(world: PairWorld) -> None:
    older, newer = world.releases
    users = world.users_on()
    idle = GREEN if users == BLUE else BLUE
    release = newer if world.live_release(users) == older else older
    wait_until("users on the live side", lambda: world.users_at(users) > 0)
    before_idle = world.users_at(idle)

    with pytest.raises(Refused, match=f"is a side of service {SERVICE}"):
        request_deploy(world.ctx, release, users, Identity(DEPLOYER))  # named at a side: refused, nothing opened
    dep = request_deploy(world.ctx, release, SERVICE, Identity(DEPLOYER))
    assert dep.endpoint == idle
    view = world.approve(dep.id, until="traffic_gate")
    # Its gates ran on the idle side with no user traffic: not one user request reached its server.
    assert world.users_at(idle) == before_idle
    assert view.gates and all(g.status != "fail" for g in view.gates)
    assert world.weights() == {users: 100, idle: 0}

    live = world.approve(dep.id, until="live")
    assert live.state == "live", live.state_reason
    assert world.weights() == {users: 0, idle: 100}
    assert (world.admission(idle), world.admission(users)) == ("open", "closed")
    status = {s.endpoint: s for s in service_status(world.ctx, SERVICE).sides}
    assert status[idle].users and status[idle].release == release
    assert status[users].release is not None and not status[users].users  # kept warm
    assert status[idle].reservation_left and status[users].reservation_left
    assert world.service_pages() == {(idle, release)}  # applied by the go-live: the service now pages the new side
    wait_until("users on the new side", lambda: world.users_at(idle) > before_idle)
    # One thread message followed the ramp, edited in place at each step and soak: its last text is the end.
    ramp = world.ramp_message(dep.id)
    assert ramp.updated >= len(world.ctx.settings.service(SERVICE).ramp.steps) + 2  # the cohort, each step, the end
    # Each side's line carries its last soak window (how many user requests it got there depends on the pace).
    soak = r"( — (TTFT p99 \d+ ms, )?errors \d+\.\d% of \d+ requests| — no user requests in the last soak)?"
    lines = ramp.text.splitlines()
    assert lines[3:] == ["Done: the ramp is complete.",
                         f"Fast path back: `/kimi rollback {SERVICE}` (one route change to the side kept warm)."], ramp.text
    assert re.fullmatch(rf"• {idle}: 100%( \+ internal cohort)?{soak}", lines[1]), ramp.text
    assert re.fullmatch(rf"• {users}: 0%{soak}", lines[2]), ramp.text
    assert f"rollback {SERVICE}" in str(ramp.blocks)  # the one-click fast path back, under the finished ramp
    (plot,) = world.ramp_plots(dep.id)
    assert plot.mimetype == "image/png" and plot.length > 0


def test_the_split_at_the_gateway_matches_the_route_weights_within_the_conformance_tolerance(
        warm_pair: PairWorld) -> None:
    world = warm_pair
    users = world.users_on()
    idle = GREEN if users == BLUE else BLUE
    idle_settings = world.ctx.settings.endpoint(idle)
    apply_admission(world.ctx, idle_settings, Admission.share(25), "test: a quarter to the idle side")
    world.gateway.sync()  # the gateway serves the new weights now, whatever its poll thread's pace on a busy CPU
    try:
        samples = []
        # As the conformance suite does, up to CONFORMANCE_TRIES samples: one split of 500 random choices falls
        # outside ±0.05 about once in a hundred even when the weights are served exactly.
        for _ in range(CONFORMANCE_TRIES):
            before = world.gateway.counts()
            models_seen(str(world.sandbox.gateway_url), CONFORMANCE_REQUESTS)
            during = world.gateway.counts() - before
            # Ordinary requests only (the background users' cohort share rides along and all goes to the idle side).
            ordinary = {side: sum(n for routed, n in during.items() if routed.target == side and not routed.cohort)
                        for side in (users, idle)}
            total = sum(ordinary.values())
            assert total >= CONFORMANCE_REQUESTS
            samples.append(ordinary)
            if (abs(ordinary[idle] / total - 0.25) <= CONFORMANCE_TOLERANCE
                    and abs(ordinary[users] / total - 0.75) <= CONFORMANCE_TOLERANCE):
                break
        else:
            raise AssertionError(f"no sample within ±{CONFORMANCE_TOLERANCE} of 25/75: {samples}")
    finally:
        apply_admission(world.ctx, idle_settings, Admission.closed(), "test: everyone back")
    assert world.weights() == {users: 100, idle: 0}


def test_rollback_of_a_service_is_one_route_change_to_the_side_kept_warm(warm_pair: PairWorld) -> None:
    world = warm_pair
    users = world.users_on()
    warm = GREEN if users == BLUE else BLUE
    warm_release = world.live_release(warm)
    assert warm_release is not None
    assert world.tested() == {BLUE, GREEN}  # the warm side runs a release that passed its gates
    writes, workload = world.route_writes(), world.workload_writes()
    applied = len(world.rules_applied(warm))

    # The service call itself (what `/kimi rollback kimi`, the Roll back button and `kimi-ops rollback kimi` reach).
    done = rollback_service(world.ctx, SERVICE, Identity(DEPLOYER))

    assert (done.to_side, done.from_side, done.release) == (warm, users, warm_release)
    assert world.route_writes() - writes == 1  # one route change…
    assert world.workload_writes() == workload  # …and nothing else: no pod moved
    assert world.weights() == {warm: 100, users: 0}
    assert world.users_on() == warm
    # Every request sent after the rollback is answered by the warm side: each answer names its release. (The gateway's
    # counts are no proof here: a background user's request routed before the change is counted when it answers.)
    assert warm_release != world.live_release(users)
    answered = Counter()
    for _ in range(40):
        answer = HTTP.get(f"{world.sandbox.gateway_url}/v1/models")
        answer.raise_for_status()
        answered[answer.headers.get("x-kimi-model")] += 1
    assert answered == Counter({warm_release: 40}), answered
    with world.ctx.uow() as uow:
        assert uow.audit.actions(f"service:{SERVICE}", "service.rolled_back")
    # Prometheus's pages follow the users at once: the service's own rules in the cluster now page the warm side with
    # its release, applied (and audited) by the rollback itself.
    assert world.service_pages() == {(warm, warm_release)}
    assert len(world.rules_applied(warm)) == applied + 1 and world.rules_applied(warm)[-1] == warm_release


def test_kimi_ops_rollback_of_a_service_from_a_terminal_moves_the_users_and_their_pages(
        warm_pair: PairWorld, tmp_path: Path) -> None:
    world = warm_pair
    users = world.users_on()
    warm = GREEN if users == BLUE else BLUE
    warm_release = world.live_release(warm)
    applied = len(world.rules_applied(warm))
    env = world.sandbox.environment(tmp_path / "kubeconfig")

    done = run_in_process(["rollback", SERVICE, "--as", DEPLOYER], env, tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{SERVICE} rolled back to {warm} ({warm_release}) in one route change" in done.stdout
    assert world.users_on() == warm and world.weights() == {warm: 100, users: 0}
    assert world.service_pages() == {(warm, warm_release)}
    assert len(world.rules_applied(warm)) == applied + 1
    refused = run_in_process(["rollback", SERVICE, "--to", "rel-x", "--as", DEPLOYER], env, tmp_path)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "Traceback" not in said
    assert f"`kimi-ops deploy rel-x --to {SERVICE}`" in said, said  # what would serve that release instead


def test_rules_the_cluster_refuses_after_a_service_rollback_are_said_under_the_rollback(
        warm_pair: PairWorld) -> None:
    world = warm_pair
    users = world.users_on()
    warm = GREEN if users == BLUE else BLUE
    warm_release = world.live_release(warm)
    kube = world.sandbox.stand_ins["kube"]
    with kube.denying("PrometheusRule", "rules.policy.example", "PrometheusRules need a <!here> team label"):
        done = rollback_service(world.ctx, SERVICE, Identity(DEPLOYER))

    assert done.to_side == warm and world.users_on() == warm  # the rollback stands
    SlackNotifier(WebClient(token="xoxb-t", base_url=world.slack.api_url), world.ctx.uow, world.ctx.clock
                  ).deliver_pending()
    rollback = [m for m in world.slack.messages if m.thread_ts is None and f"{SERVICE} rolled back by" in m.text][-1]
    assert warm in rollback.text and warm_release in rollback.text
    replies = [m.text for m in world.slack.thread(rollback.channel, rollback.ts) if m.thread_ts == rollback.ts]
    # Both rule objects that follow the users (the side's and the service's), each refused in the webhook's words,
    # escaped: the thread is told, nobody is pinged.
    assert sorted(re.findall(r"`(kimi-ops-slo-[a-z-]+)` was not applied", " ".join(replies))) == sorted(
        [rule_object_name(warm), rule_object_name(SERVICE)]), replies
    assert all('denied the request: PrometheusRules need a &lt;!here&gt; team label' in r for r in replies), replies
    assert all("the next metrics-watch round applies the rules again" in r for r in replies)
    assert all(f"was not applied after {SERVICE} rolled back to {warm} (" in r for r in replies), replies
    with world.ctx.uow() as uow:
        refused = [d["rule"] for _, _, _, d in uow.audit.actions(f"endpoint:{warm}", "alert_rules.not_applied")]
    assert set(refused[-2:]) == {rule_object_name(warm), rule_object_name(SERVICE)}

    apply_after_go_live(world.ctx, warm)  # the cluster takes them again (what the next metrics-watch round does)
    assert world.service_pages() == {(warm, warm_release)}


def test_an_alerts_roll_back_button_about_a_side_rolls_its_service_back_in_one_route_change(
        warm_pair: PairWorld) -> None:
    world = warm_pair
    users = world.users_on()
    warm = GREEN if users == BLUE else BLUE
    spec = world.ctx.settings.endpoint(users)
    assert spec is not None
    with world.ctx.uow() as uow:
        watch = Incidents(world.ctx, uow, uow.endpoints.get(users), spec, world.ctx.clock.now(), {})
        watch.open("errors", "page", "error rate 12% over 5 min")
        incident = watch.open_now["errors"].id
        uow.commit()
    SlackNotifier(WebClient(token="xoxb-t", base_url=world.slack.api_url), world.ctx.uow, world.ctx.clock
                  ).deliver_pending()
    (alert,) = [m for m in world.slack.messages if f"`{users}` errors" in m.text]
    assert f"Fast path back: `/kimi rollback {SERVICE}` (one route change to the side kept warm)." in alert.text
    writes, workload = world.route_writes(), world.workload_writes()
    applied = len(world.rules_applied(warm))
    try:
        # What the Roll back button's listener calls with the clicker and the button's value.
        answer = incidents.roll_back(Root(world.ctx, world.engine), Identity(DEPLOYER), str(incident))
    finally:
        with world.ctx.uow() as uow:
            Incidents(world.ctx, uow, uow.endpoints.get(users), spec, world.ctx.clock.now(),
                      {"errors": uow.incidents.get_for_update(incident)}).close("errors", "test over")
            uow.commit()

    assert f"*{SERVICE}* rolled back to *{warm}*" in answer.text
    assert world.route_writes() - writes == 1 and world.workload_writes() == workload
    assert world.weights() == {warm: 100, users: 0}
    # The service's own rules now page the side users are back on, with its release, applied by the rollback.
    assert world.rules_applied(warm)[-1:] == [world.live_release(warm)] and len(world.rules_applied(warm)) > applied
    assert world.service_pages() == {(warm, world.live_release(warm))}



def test_a_crash_mid_ramp_resumes_at_the_recorded_step(world: PairWorld) -> None:
    # Soaks long enough to be stopped during one.
    with world.endpoint_changed(world.idle(), ramp={"soak_seconds": 1.0, "sample_seconds": 0.5}):
        dep, users, idle = world.to_the_traffic_gate()
        first = world.engine
        driver, result = in_background(lambda: first.advance(dep))
        wait_until("the 25% step", lambda: world.admission(idle) == "25%")
        first.stop_all()  # the replica stops mid-soak (SIGTERM): it drives no further step
        joined(driver, result)
        assert get_deployment(world.ctx, dep).state == "ramping"
        assert world.weights() == {users: 75, idle: 25}  # nothing moved the weights while nobody drove

        mark = world.audit_mark()
        world.engine = Engine(world.ctx, readiness_pause=0.2)  # the replica that takes over
        resumed = world.engine.resume(dep)

        assert resumed.state == "live", resumed.state_reason
        # It went on from the recorded step (applied again, then soaked anew), never back to the cohort or 5%.
        assert world.admissions_since(idle, mark) == ["25%", "50%", "open"]
        assert world.weights() == {users: 0, idle: 100}


def test_a_latency_regression_on_the_candidate_aborts_the_ramp_and_returns_all_traffic(world: PairWorld) -> None:
    # The sandbox's soaks: what the candidate's users meet during one is what breaks the objective.
    with world.endpoint_changed(world.idle(), ramp={k: SANDBOX_PAIR_RAMP[k] for k in ("soak_seconds", "sample_seconds")}):
        dep, users, idle = world.to_the_traffic_gate()
        mark = world.audit_mark()
        world.server(idle).configure(first_token_delay=2.5)  # well above the sides' 1000 ms first-token objective
        try:
            ended = world.engine.advance(dep)
        finally:
            world.server(idle).reset()

    assert ended.state == "failed", ended.state_reason
    assert "broke its objectives" in (ended.state_reason or "") and "first-token p99" in (ended.state_reason or "")
    assert f"all weight is back on {users}" in (ended.state_reason or "")
    assert world.weights() == {users: 100, idle: 0}
    assert world.admissions_since(idle, mark)[-1] == "closed"
    assert world.admission(users) == "open" and world.users_on() == users
    before = world.gateway.counts_by_admission()
    models_seen(str(world.sandbox.gateway_url), 40)
    # Counted by the route each request was routed under (requests sent to the candidate before the abort may
    # still be finishing): under the route the abort wrote, every request went to the users' side.
    after: Counter[tuple[str, str]] = Counter()
    for (label, routed), n in (world.gateway.counts_by_admission() - before).items():
        after[(label, routed.target)] += n
    assert after.get(("closed", idle), 0) == 0 and after.get(("closed", users), 0) >= 40
    # The side that failed runs a release that did not pass: no warm side to roll back to, no tested replacement.
    assert world.tested() == {users}
    assert "Aborted: ramp step" in world.ramp_message(dep).text
    with pytest.raises(Refused, match="does not run a release that passed its gates"):
        rollback_service(world.ctx, SERVICE, Identity(DEPLOYER))


def test_a_ramp_holds_before_a_step_that_needs_approval_until_an_approver_lets_it_go_on(world: PairWorld) -> None:
    with world.endpoint_changed(world.idle(), ramp={"approval_steps": [25]}):
        dep, users, idle = world.to_the_traffic_gate()
        held = world.engine.advance(dep)
        assert held.state == "ramping" and world.admission(idle) == "5%"  # it stopped before 25%
        assert dep not in world.engine.lapsed()  # a person is to act: no replica takes it over meanwhile
        with pytest.raises(Refused, match="someone else must approve"):
            approve_ramp_step(world.ctx, dep, "25%", Identity(DEPLOYER))
        with pytest.raises(Refused, match="does not hold before 50%"):
            approve_ramp_step(world.ctx, dep, "50%", APPROVER)
        approve_ramp_step(world.ctx, dep, "25%", APPROVER)
        live = world.engine.advance(dep)
        assert live.state == "live", live.state_reason
        assert world.weights() == {users: 0, idle: 100}


def test_a_ramp_step_nobody_approves_expires_like_a_gate_and_returns_all_weight_to_the_previous_side(
        world: PairWorld) -> None:
    allowed = dt.timedelta(seconds=1.2)  # gate_wait_after_apply_minutes, the wait a gate after apply has
    with world.endpoint_changed(world.idle(), ramp={"approval_steps": [5]},
                       gate_wait_after_apply_minutes=allowed.total_seconds() / 60):
        dep, users, idle = world.to_the_traffic_gate()
        held = world.engine.advance(dep)
        assert held.state == "ramping" and world.admission(idle) == "internal"  # it holds before 5%
        with world.ctx.uow() as uow:
            (_, asked_at) = ramp_step_waiting(uow, dep) or pytest.fail("no step waits for an approval")
        wait_until("the step's approval to be due", lambda: world.ctx.clock.now() >= asked_at + allowed, 30)

        run = run_job(world.ctx, "gate-expiry", engine=world.engine)  # the scheduled job, as the elected replica runs it

    assert run.ok and f"deployment #{dep}: ramp expired (all weight returning to {users})" in run.summary, run.summary
    ended = get_deployment(world.ctx, dep)
    assert ended.state == "expired", ended.state_reason
    assert "the approval of ramp step 5% expired" in (ended.state_reason or "")
    assert f"all weight is back on {users}" in (ended.state_reason or "")
    assert world.weights() == {users: 100, idle: 0}
    assert world.admission(users) == "open" and world.admission(idle) == "closed" and world.users_on() == users
    with world.ctx.uow() as uow:
        (expiry,) = uow.audit.actions(f"deployment:{dep}", "gate.expired")
    assert expiry[3]["gate"] == "ramp" and expiry[3]["step"] == "5%"
