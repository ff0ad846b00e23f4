"""The demo's tours: the newcomer's whole loop and the blue/green story, played on the sandbox and printed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.cli.shell import Shell
    from bot.sandbox.gateway import GatewayStandIn
    from bot.sandbox.openai_server import OpenAIServer
    from bot.sandbox.stack import Sandbox

GATES = ("artifact", "infrastructure", "model", "traffic")
LONG_CONTEXT_PLAYED = 0.4  # the share of 60,000-token prompts the tour plays as production's traffic
DEMO_POD_RESTART_SECONDS = 3.0  # how long the demo's deleted model pod takes to come back (the drill's recovery)
# The sandbox's sweep without the work no reader of a report sees: the warm-up before each prefix mode and the
# bisection below the knee (a level each, and on the long-context mix each level takes seconds). Its ceiling is
# the first level the stand-in refuses (six running and two waiting: 12 gets a third 429s), so the fixed prompt's
# knee is the 12 the refined sweep found and the proposal the same 8; the long-context mix still breaks at 4 (KV
# cache) and proposes 2. Both prefix modes and the burst round stay: the burst is what makes 12 clients meet the
# stand-in at one instant on a busy machine.
DEMO_SWEEP_CHANGES: dict[str, Any] = {"warmup_requests": 0, "refine_steps": 0, "ceiling": 12}
# Its /metrics sampler reads ten times a second, not twenty: a reading costs the stand-in and the reader 3 ms of CPU,
# and the peaks a level breaks on here last longer than a tenth of a second (the fixed prompt's knee is its 429s,
# the long-context mix's a KV cache held full by prompts that take a second or more to answer).
DEMO_SWEEP_METRICS_INTERVAL = 0.1


class ScriptFailed(Exception):
    """A demo step did not end where it should; the message says which."""


class Tour:
    """Types lines into the shell as named people and prints what each of them sees."""

    def __init__(self, console: Shell, echo: Callable[[str], None], gateway: GatewayStandIn | None = None,
                 model: OpenAIServer | None = None) -> None:
        self.console = console
        self.echo = echo
        self.gateway = gateway  # the gateway stand-in, whose counts show what users got
        self.model = model  # the model server stand-in, which can count a burst of errors (the burn-rate alert)
        self._seen: Counter[tuple[str, Any]] = Counter()
        self._sides_seen: Counter[Any] = Counter()
        self._labels_seen: Counter[str] = Counter()

    def step(self, title: str) -> None:
        self.echo("")
        self.echo(f"━━ {title} " + "━" * max(0, 70 - len(title)))

    def say(self, user: str, line: str) -> list[str]:
        if self.console.user != user:
            self.console.handle(f"/as {user}")
        self.echo(f"{user}> {line}")
        out: list[str] = self.console.handle(line)
        for text in out:
            self.echo(text)
        return out

    def scheduler(self, job: str) -> None:
        """Run a scheduled job now, as the elected replica would, and show what it posted."""
        from bot.services.scheduling import run_job

        result = run_job(self.console.ctx, job, trigger="demo")
        self.echo(f"(scheduler) {job}: {result.summary}")
        self.console.app.deliver()
        for text in self.console.new_output():
            self.echo(text)
        if not result.ok:
            raise ScriptFailed(f"the {job} job failed: {result.summary}")

    def _button(self, label: str, gate: str, deployment: int) -> int | None:
        """The console number of the newest ``label`` button on the gate message of ``deployment``, if offered."""
        header = f"{gate.capitalize()} gate · deployment #{deployment}"
        for number in range(len(self.console.buttons), 0, -1):
            message, element = self.console.buttons[number - 1]
            if element["text"]["text"] == label and header in _text(message.blocks):
                return number
        return None

    def press(self, user: str, label: str, gate: str, deployment: int) -> list[str]:
        """Press ``label`` on the gate message of ``deployment`` as ``user``."""
        number = self._button(label, gate, deployment)
        if number is None:
            raise ScriptFailed(f"no {label} button on the {gate} gate of deployment #{deployment}; see the messages above")
        return self.say(user, str(number))

    def click(self, user: str, label: str) -> list[str]:
        """Press the newest button labelled ``label`` as ``user``."""
        for number in range(len(self.console.buttons), 0, -1):
            _message, element = self.console.buttons[number - 1]
            if element["text"]["text"] == label:
                return self.say(user, str(number))
        raise ScriptFailed(f"no {label!r} button; see the messages above")

    def sides(self, title: str) -> Counter[str]:
        """Print how many user requests the gateway sent to each side of the pair since the last call."""
        if self.gateway is None:
            return Counter()
        now = self.gateway.counts()
        new = now - self._sides_seen
        self._sides_seen = now
        got: Counter[str] = Counter()
        for routed, count in new.items():
            got[routed.target] += count
        self.echo(f"(gateway) {title}: " + ", ".join(f"{n} → {side}" for side, n in sorted(got.items())))
        self._echo_labels()
        return got

    def expect_long_context_mix(self, endpoint: str, share: float) -> None:
        """The live mix stored for ``endpoint`` (what its next traffic gate replays) has ``share`` long-context requests.

        A state read, not a wait: the metrics watch's round ran to its commit before :meth:`scheduler` returned.
        The background users' short requests in the same minutes count too (more of them the slower the machine:
        100,013 requests read as 39.996 %), so a tenth below ``share`` still is the mix played.
        """
        from bot.services.capacity import capacity_view

        live = capacity_view(self.console.ctx, endpoint).live_mix
        if live is None or live.long_context_share < 0.9 * share:
            raise ScriptFailed(f"the live mix stored for {endpoint} is not the long-context-heavy one played "
                               f"({live.words() if live else 'none stored'}); its next traffic gate would not replay it")

    def expect_live(self, deployment: int) -> None:
        self.expect(deployment, "live")

    def expect(self, deployment: int, state: str) -> None:
        from bot.services.deployments import get_deployment

        view = get_deployment(self.console.ctx, deployment)
        if view.state != state:
            raise ScriptFailed(f"deployment #{deployment} is {view.state}, not {state}: {view.state_reason or 'see above'}")

    def users(self, title: str, order: tuple[str, ...], until: str | None = None) -> dict[str, Counter[tuple[bool, str]]]:
        """Print what the gateway did with users' requests since the last call, per admission of the route.

        With ``until``, first wait for a background user taken under that admission (a ramp that just opened has
        answered nobody yet on a slow machine). Returns ``admission → (cohort, Kimi K3 | fallback | other) → count``
        for the script's own checks.
        """
        if self.gateway is None:
            return {}
        if until is not None and not self.gateway.wait_for_admission(until, self._seen, timeout=120):
            raise ScriptFailed(f"no user request was taken with the route {until} in two minutes")
        now = self.gateway.counts_by_admission()
        new = now - self._seen
        self._seen = now
        by_admission: dict[str, Counter[tuple[bool, str]]] = {}
        for (admission, routed), count in new.items():
            by_admission.setdefault(admission or "no route", Counter())[(routed.cohort, _backend(routed.target))] += count
        self.echo(f"(gateway) {title}:")
        for admission in sorted(by_admission, key=lambda a: order.index(a) if a in order else len(order)):
            got = by_admission[admission]
            parts = []
            for cohort, who in ((False, "ordinary users"), (True, "internal cohort")):
                others = sum(n for (c, backend), n in got.items() if c == cohort and backend not in (KIMI, FALLBACK))
                parts.append(f"{who} {got[(cohort, KIMI)]} → {KIMI}, {got[(cohort, FALLBACK)]} → {FALLBACK}"
                             + (f", {others} unanswered" if others else ""))
            self.echo(f"  route {admission:<8} {' · '.join(parts)}")
        self._echo_labels()
        return by_admission

    def _echo_labels(self) -> None:
        """Which model every answer said it came from (the route's x-kimi-model), since the last call."""
        if self.gateway is None:
            return
        now = self.gateway.labels()
        new, self._labels_seen = now - self._labels_seen, now
        if new:
            self.echo(f"  answers labelled {self.gateway.model_header}: "
                      + ", ".join(f"{label} ×{n}" for label, n in sorted(new.items())))

    def expect_no_user_reached_kimi(self, seen: dict[str, Counter[tuple[bool, str]]], admission: str,
                                    cohort_too: bool = True) -> None:
        got = seen.get(admission, Counter())
        leaked = sum(n for (cohort, backend), n in got.items() if backend == KIMI and (cohort_too or not cohort))
        if leaked:
            raise ScriptFailed(f"{leaked} user requests reached Kimi K3 while the route was {admission}")


KIMI, FALLBACK = "Kimi K3", "fallback"


def _backend(target: str) -> str:
    """A gateway target (a Service name, ``unavailable``, ``no-route``) as the demo names it."""
    from bot.sandbox.stack import ENDPOINT
    from bot.sandbox.traffic import FALLBACK_SERVICE

    return {ENDPOINT: KIMI, FALLBACK_SERVICE: FALLBACK}.get(target, target)


def _text(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(str((b.get("text") or {}).get("text", "")) for b in blocks)


# The order the gateway's counts are printed in: as a deploy moves users, and as a ramp lets them back.
CLOSING = ("no route", "open", "closed")
RAMPING = ("closed", "internal", "10%", "50%", "open")


def tour(tour: Tour) -> None:
    from bot.sandbox.stack import APPROVER_1, APPROVER_2, DEPLOYER, ENDPOINT

    first, second = "kimi-k3-2026-08-01", "kimi-k3-2026-09-01"
    tour.step("The releases on file (two example tuples, weights and images seeded in moto)")
    tour.say(DEPLOYER, "/kimi release list")
    tour.say(DEPLOYER, f"/kimi diff {first} {second}")

    tour.step("The reservation watch reads the training plan and warns ahead of its end")
    tour.scheduler("reservation-watch")
    tour.say(DEPLOYER, "/kimi reservations")

    tour.step(f"{DEPLOYER} deploys {first}; approvers {APPROVER_1} and {APPROVER_2} take turns on the four gates")
    tour.users("users before the first release (no route yet: the gateway answers 404)", CLOSING)
    tour.say(DEPLOYER, f"/kimi deploy {first} to {ENDPOINT}")
    tour.press(DEPLOYER, "Approve", "artifact", 1)  # refused: on prod the requester may not approve their own
    _through_model_gate(tour, 1, (APPROVER_1, APPROVER_2, APPROVER_1))
    tour.press(APPROVER_2, "Accept proposed limits", "traffic", 1)  # the sweep measured the knee: admit no more
    tour.press(APPROVER_2, "Approve", "traffic", 1)
    ramp = tour.users("the ramp: the internal cohort first, then 10% and 50% of ordinary users, then everyone", RAMPING,
                      until="open")
    tour.expect_no_user_reached_kimi(ramp, "internal", cohort_too=False)
    tour.expect_live(1)

    tour.step("Readiness probes send a real completion every few minutes")
    tour.scheduler("readiness-probe")
    tour.scheduler("readiness-probe")
    tour.say(APPROVER_1, f"/kimi status {ENDPOINT}")

    if tour.model is not None:
        tour.step("The metrics watch reads /metrics every minute; a burst of 5xx answers burns the error budget and pages")
        tour.scheduler("metrics-watch")
        tour.model.simulate(requests=600, errors=90, ttft=0.2, e2e=2.0)  # 15 % of a busy minute answered 5xx
        tour.scheduler("metrics-watch")  # the alert: live release, last deployment, Acknowledge / Silence… / Roll back
        tour.say(APPROVER_1, f"/kimi slo {ENDPOINT}")
        # Healthy traffic (the budget stops burning), but production's mix is long-context-heavy: 40 % of requests
        # carry 60,000-token prompts. The watch reads it from vLLM's histograms and asks for a capacity review.
        tour.model.simulate(requests=60_000, ttft=0.2, e2e=2.0, prompt_tokens=1_500, output_tokens=200)
        tour.model.simulate(requests=40_000, ttft=0.2, e2e=2.0, prompt_tokens=60_000, output_tokens=300)
        tour.scheduler("metrics-watch")
        tour.expect_long_context_mix(ENDPOINT, LONG_CONTEXT_PLAYED)
        tour.say(APPROVER_1, f"/kimi capacity {ENDPOINT}")

        tour.step("An availability drill: the model pod is deleted; its detection, page and recovery time are recorded")
        tour.say(DEPLOYER, f"/kimi drill {ENDPOINT} pod-deletion accept-user-impact")  # users are admitted: said so
        tour.say(DEPLOYER, "/kimi drill approve 1")  # refused: someone else approves a drill
        tour.say(APPROVER_1, "/kimi drill approve 1")  # runs now: the pod comes back after a few seconds
        tour.say(APPROVER_1, f"/kimi drills {ENDPOINT}")

    tour.step(f"{second} goes through the same gates; users move to the fallback while it is checked; its traffic gate "
              "replays production's long-context-heavy mix, and finds a lower knee than the first release's fixed prompt")
    tour.users(f"users while {first} serves", CLOSING)
    if tour.model is not None:
        tour.expect_long_context_mix(ENDPOINT, LONG_CONTEXT_PLAYED)  # still what the sweep will replay
    tour.say(DEPLOYER, f"/kimi deploy {second}")
    _through_model_gate(tour, 2, (APPROVER_2, APPROVER_1, APPROVER_2))
    # Production's mix measured less than the limits first accepted: the gate offers to accept its proposal with the
    # approval (a plain Approve would be refused). No such button means the mix did not lower the knee: the demo stops.
    # (Without the model stand-in no mix was played: the fixed prompt measures what the first release did.)
    tour.press(APPROVER_1, "Accept limits and approve" if tour.model is not None else "Approve", "traffic", 2)
    tour.users("the ramp", RAMPING, until="open")
    tour.expect_live(2)

    tour.step(f"Roll back to the complete previous release ({first}): close, drain, apply, evaluate, reopen")
    tour.say(DEPLOYER, f"/kimi rollback {ENDPOINT}")
    tour.press(APPROVER_1, "Approve", "artifact", 3)
    tour.expect_live(3)
    tour.users("users during the rollback: closed while it is applied and evaluated, then reopened", CLOSING)

    tour.step(f"{second} once more; {APPROVER_1} rejects its model gate and {first} is restored by itself")
    tour.say(DEPLOYER, f"/kimi deploy {second}")
    _through_model_gate(tour, 4, (APPROVER_2, APPROVER_1))
    tour.press(APPROVER_1, "Reject", "model", 4)
    tour.say(APPROVER_1, "the refusal answers changed; not for production")
    tour.expect(4, "rejected")
    tour.expect_live(5)  # the restore: the rollback procedure without its gate, started by the rejection
    tour.users("users while the rejected candidate waited and was replaced", CLOSING)
    tour.say(APPROVER_1, f"/kimi status {ENDPOINT}")
    tour.say(DEPLOYER, f"/kimi history {ENDPOINT}")


def pair_tour(tour: Tour) -> None:
    """The blue/green scenario: a service of two endpoints, a ramp between them, and a one-click rollback."""
    from bot.sandbox.stack import APPROVER_1, APPROVER_2, BLUE, DEPLOYER, GREEN, SERVICE

    first, second = "kimi-k3-2026-08-01", "kimi-k3-2026-09-01"
    tour.step(f"A service `{SERVICE}` of two endpoints, {BLUE} and {GREEN}: each its own node and reservation")
    tour.scheduler("reservation-watch")
    tour.say(DEPLOYER, f"/kimi status {SERVICE}")

    tour.step(f"{first} goes to {BLUE} (no side has users yet) and is ramped in")
    tour.say(DEPLOYER, f"/kimi deploy {first} to {SERVICE}")
    _through_model_gate(tour, 1, (APPROVER_1, APPROVER_2, APPROVER_1), pair=True)
    tour.press(APPROVER_2, "Accept proposed limits", "traffic", 1)
    tour.press(APPROVER_2, "Approve", "traffic", 1)
    tour.expect_live(1)
    tour.sides("users' requests up to now, per side")

    tour.step(f"{second} goes to the idle side, {GREEN}, while every user stays on {BLUE}: no downtime")
    tour.say(DEPLOYER, f"/kimi deploy {second} to {SERVICE}")
    _through_model_gate(tour, 2, (APPROVER_2, APPROVER_1, APPROVER_2), pair=True)
    during = tour.sides(f"users while {GREEN} was applied and its gates ran")
    if during[GREEN]:
        raise ScriptFailed(f"{during[GREEN]} user requests reached {GREEN} before its ramp")
    tour.press(APPROVER_1, "Accept proposed limits", "traffic", 2)
    tour.press(APPROVER_1, "Approve", "traffic", 2)
    tour.expect_live(2)
    tour.sides("users during the ramp: the cohort, then 5 %, 25 %, 50 % of the weight, then all on " + GREEN)
    tour.say(APPROVER_1, f"/kimi status {SERVICE}")

    tour.step(f"One click on the ramp message: every user back on {BLUE}, still warm with {first}")
    tour.click(DEPLOYER, f"Roll back {SERVICE}")
    tour.console.app.deliver()
    for text in tour.console.new_output():
        tour.echo(text)
    tour.sides("users since the ramp ended")
    tour.say(APPROVER_1, f"/kimi status {SERVICE}")
    from bot.services.pairs import service_status

    on = [s.endpoint for s in service_status(tour.console.ctx, SERVICE).sides if s.users]
    if on != [BLUE]:
        raise ScriptFailed(f"after the rollback users are on {on}, not {BLUE}")


def _through_model_gate(tour: Tour, deployment: int, approvers: tuple[str, ...], *, pair: bool = False) -> None:
    """Approve the artifact and infrastructure gates (and the model gate when a third approver is given).

    Between the infrastructure gate and the model gate the deploy closes the route and drains, so the
    counts printed there are what users got while the candidate was applied and checked.
    """
    tour.press(approvers[0], "Approve", "artifact", deployment)
    tour.press(approvers[1], "Approve", "infrastructure", deployment)
    if not pair:
        closed = tour.users("users while the candidate is applied and its model gate runs", CLOSING)
        tour.expect_no_user_reached_kimi(closed, "closed")
    if len(approvers) > 2:
        tour.press(approvers[2], "Approve", "model", deployment)


def start_world(data_dir: Path, *, pair: bool = False, overrides: tuple[dict[str, Any], dict[str, Any]] = ({}, {}),
           ) -> tuple[Sandbox, Shell]:
    from bot.cli.shell import Shell
    from bot.sandbox.stack import CHANNEL, DEPLOYER, GROUPS, SANDBOX_SWEEP, USERS_PER_SECOND, Sandbox

    # Drills on: a deleted pod comes back DEMO_POD_RESTART_SECONDS later, and a drill looks twice a second.
    settings = {"drill_poll_seconds": 0.5, "traffic_sweep": {**SANDBOX_SWEEP, **DEMO_SWEEP_CHANGES}, **overrides[0]}
    sandbox = Sandbox(data_dir, users_per_second=USERS_PER_SECOND, pair=pair, drills=not pair,
                      pod_restart_seconds=DEMO_POD_RESTART_SECONDS, sweep_metrics_seconds=DEMO_SWEEP_METRICS_INTERVAL,
                      settings_overrides=settings,
                      endpoint_overrides=overrides[1]).start()
    try:
        return sandbox, Shell(sandbox.ctx, user=DEPLOYER, channel=CHANNEL, groups=GROUPS)
    except BaseException:
        sandbox.stop()
        raise
