"""The README's first command: ``kimi-ops demo`` plays the whole loop on the stand-ins and prints it.

It runs as a newcomer runs it (the console script in a fresh process, no Slack,
AWS or cluster), and the assertions read what they would read: the reservation
countdown and its alert, a self-approval refused, four gates with real
measurements, users counted at the gateway stand-in (on the fallback while the
candidate is checked, then the ramp), readiness probe history, production
comparison, the rollback's steps, a rejected candidate restored by itself and
the history. ``kimi-ops demo --pair`` (the blue/green scenario: a ramp to the idle
side and a one-click rollback) and a ``kimi-ops sandbox`` console session run beside it, each in its own process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.adapters.clock import SystemClock
from bot.bootstrap import FirstUse, build_context, production_adapters
from bot.config import load_settings

# The whole demo runs in one subprocess (about 80 s alone, longer with every core busy); the pair scenario
# (`demo --pair`) and the console session run beside it, each in its own, so the module waits for the longest.
pytestmark = pytest.mark.timeout(900)  # a bound on a hang: on a busy machine the demo alone has taken over 300 s


Demo = tuple[subprocess.Popen[str], Path]

# What the console test types into `kimi-ops sandbox`: a command, a deploy, a button as an approver, a refused deploy.
TYPED = "/kimi release list\n/kimi deploy kimi-k3-2026-08-01\n/as U0APPROVER1\n1\n/kimi deploy nope\n/quit\n"


def _newcomer_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "AWS_", "SLACK_"))}
    env["KIMI_DATA_DIR"] = str(home / ".kimi-ops")
    return env


def _start(home: Path, *args: str, typed: str | None = None) -> Demo:
    """``kimi-ops ARGS`` in a fresh process; its output goes to files (a full pipe nobody reads would stall it)."""
    with (home / "stdout").open("w") as out, (home / "stderr").open("w") as err:
        proc = subprocess.Popen([sys.executable, "-c", "from bot.cli.main import main; main()", *args],
                                stdin=subprocess.PIPE if typed is not None else subprocess.DEVNULL,
                                stdout=out, stderr=err, text=True, env=_newcomer_env(home), cwd=home)
    if typed is not None:
        assert proc.stdin is not None
        proc.stdin.write(typed)  # a few lines: the pipe holds them until the console reads
        proc.stdin.close()
    return proc, home


def _finished(demo: Demo) -> subprocess.CompletedProcess[str]:
    proc, home = demo
    proc.wait(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, (home / "stdout").read_text(),
                                       (home / "stderr").read_text())


@pytest.fixture(scope="module", autouse=True)
def demos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Demo]]:
    """Both scenarios and the console session started at once, before the module's first test (those that need
    none of them run meanwhile); each test waits for the one it reads."""
    started = {"single": _start(tmp_path_factory.mktemp("newcomer"), "demo"),
               "pair": _start(tmp_path_factory.mktemp("pair"), "demo", "--pair"),
               "console": _start(tmp_path_factory.mktemp("console"), "sandbox", typed=TYPED)}
    yield started
    for proc, _ in started.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def demo_run(demos: dict[str, Demo]) -> subprocess.CompletedProcess[str]:
    return _finished(demos["single"])


@pytest.fixture(scope="module")
def pair_demo_run(demos: dict[str, Demo]) -> subprocess.CompletedProcess[str]:
    return _finished(demos["pair"])


def test_the_cli_context_has_a_production_adapter_for_every_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No AWS credentials, kubeconfig or network: building them must not touch any of those.
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "KUBECONFIG", "KIMI_CONFIG", "SLACK_BOT_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    settings = load_settings(data_dir=tmp_path, auto_migrate=True, rollout_poll_seconds=0.5)
    ctx = build_context(settings, connect=True)
    try:
        ports = {name: adapter for name, adapter in vars(ctx.ports).items() if adapter is not None}
        # Each adapter is built (and boto3 or kubernetes imported) on first use, not when the CLI starts.
        assert all(isinstance(adapter, FirstUse) and not adapter.built for adapter in ports.values())
        wired = {name: type(adapter.adapter()).__name__ for name, adapter in ports.items()}
        assert wired == {
            "artifacts": "RegionalArtifactVerifier", "cluster": "ContextClusters",
            "reservations": "AwsReservationSource", "endpoint": "HttpEndpointClient",
            "evaluator": "HttpEvaluator", "loadgen": "HttpLoadGenerator", "gpus": "HttpGpuTelemetry",
        }
        made = production_adapters(settings, SystemClock())
        assert {name for name, adapter in vars(made).items() if adapter is not None} == set(wired)
        assert ctx.ports.cluster.poll_seconds == 0.5  # KIMI_ROLLOUT_POLL_SECONDS reaches the watch
        # A cluster that cannot be reached is an error check the gate shows, never a pass or a crash.
        preflight = ctx.ports.cluster.preflight(load_settings(endpoints=[{"name": "x", "environment": "dev"}]).endpoints[0])
        assert [c.status for c in preflight] == ["error"] and "no access to cluster context" in preflight[0].reason
    finally:
        ctx.close()


@pytest.mark.parametrize("command", ["demo", "sandbox"])
def test_without_the_sandbox_extra_the_command_says_how_to_install_it(command: str, tmp_path: Path) -> None:
    # A production install: the extra's modules cannot be imported (None in sys.modules makes `import` fail).
    blocked = "import sys; sys.modules.update(dict.fromkeys(['moto', 'kmock', 'aiohttp'], None)); "
    result = subprocess.run([sys.executable, "-c", blocked + "from bot.cli.main import main; main()", command],
                            capture_output=True, text=True, env=_newcomer_env(tmp_path), cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip() == "error: the sandbox is not installed: pip install 'kimi-ops[sandbox]'"
    assert not (tmp_path / ".kimi-ops" / "sandbox").exists()  # nothing was started


def test_the_pair_demo_ramps_the_idle_side_and_rolls_back_in_one_click(
        pair_demo_run: subprocess.CompletedProcess[str]) -> None:
    assert pair_demo_run.returncode == 0, pair_demo_run.stdout[-3000:] + pair_demo_run.stderr[-3000:]
    out = pair_demo_run.stdout
    assert "Traceback" not in out + pair_demo_run.stderr
    assert "🟢 Deployment #1: deploy of *kimi-k3-2026-08-01* to *kimi-blue* — live" in out
    assert "🟢 Deployment #2: deploy of *kimi-k3-2026-09-01* to *kimi-green* — live" in out
    # The candidate's gates ran on the idle side with every user on the other (the demo stops otherwise).
    during = re.search(r"\(gateway\) users while kimi-green was applied and its gates ran: (.*)", out)
    assert during is not None and "→ kimi-blue" in during[1] and "kimi-green" not in during[1]
    ramp = out.split("users during the ramp")[0]
    for step in ("internal", "5%", "25%", "50%", "open"):
        assert f"Admission of kimi-green is now {step}" in ramp
    assert "[file ramp-kimi-green-2.png" in ramp  # the picture of the ramp, in the thread
    rollback = out.split("One click on the ramp message")[1]
    assert "*kimi* rolled back to *kimi-blue* (kimi-k3-2026-08-01) in one route change" in rollback
    assert "*kimi-blue*\n  *release:* kimi-k3-2026-08-01 — users are here" in rollback  # the status at the end
    assert "*kimi-green*\n  *release:* kimi-k3-2026-09-01 — kept warm" in rollback


def test_demo_ends_with_the_rejected_candidate_restored(demo_run: subprocess.CompletedProcess[str]) -> None:
    assert demo_run.returncode == 0, demo_run.stdout[-3000:] + demo_run.stderr[-3000:]
    out = demo_run.stdout
    assert "Traceback" not in out + demo_run.stderr
    for deployment, what in ((1, "deploy of *kimi-k3-2026-08-01*"), (2, "deploy of *kimi-k3-2026-09-01*"),
                             (3, "rollback of *kimi-k3-2026-08-01*"), (5, "restore of *kimi-k3-2026-08-01*")):
        assert f"Deployment #{deployment}: {what} to *kimi-prod* — live" in out
    rollback = out.split("Roll back to the complete previous release")[1].split("once more;")[0]
    # Each thread's steps are one progress message, edited in place: the console shows how it ended.
    assert "*Progress:* ended: live" in rollback and "→ *live*" in rollback
    # The rejected candidate: its thread says so and names the restore, which runs the rollback's steps by itself.
    rejected = out.split("once more;")[1]
    assert "→ *rejected*: model gate rejected by @U0APPROVER1: the refusal answers changed; not for production" in rejected
    assert "Restore of kimi-k3-2026-08-01 started as deployment #5: users stay closed out" in rejected
    assert "*Progress:* ended: live" in rejected.split("Restore of kimi-k3-2026-08-01 started")[1]
    assert "*live release:* kimi-k3-2026-08-01" in rejected  # the status at the end
    for line in ("*#5* restore of *kimi-k3-2026-08-01* — live", "*#4* deploy of *kimi-k3-2026-09-01* — rejected",
                 "*#3* rollback of *kimi-k3-2026-08-01* — superseded"):
        assert line in rejected


def _gateway_blocks(out: str, title: str) -> list[dict[str, tuple[int, ...]]]:
    """Each ``(gateway) TITLE…`` block as admission → (ordinary → Kimi, → fallback, cohort → Kimi, → fallback)."""
    row = re.compile(r"^  route (\S+(?: route)?)\s+ordinary users (\d+) → Kimi K3, (\d+) → fallback.* · "
                     r"internal cohort (\d+) → Kimi K3, (\d+) → fallback")
    blocks = []
    for chunk in out.split(f"(gateway) {title}")[1:]:
        rows = {}
        for line in chunk.splitlines()[1:]:
            found = row.match(line)
            if not found:
                break
            rows[found[1]] = tuple(int(n) for n in found.groups()[1:])
        blocks.append(rows)
    return blocks


def test_demo_shows_users_on_the_fallback_while_the_gates_run_then_the_ramp(demo_run: subprocess.CompletedProcess[str]) -> None:
    out = demo_run.stdout
    # Counted at the gateway stand-in, per admission of the route that took each background user's request.
    closed_out = _gateway_blocks(out, "users while the candidate is applied and its model gate runs")
    assert len(closed_out) == 3  # deploys #1, #2 and the rejected #4
    for rows in closed_out:
        kimi, fallback, cohort_kimi, cohort_fallback = rows["closed"]
        assert kimi == cohort_kimi == 0 and fallback > 0 and cohort_fallback > 0
    assert closed_out[1]["open"][0] > 0  # before deploy #2 closed the route, users had Kimi K3
    ramps = _gateway_blocks(out, "the ramp")
    assert len(ramps) == 2
    for rows in ramps:
        assert list(rows) == ["closed", "internal", "10%", "50%", "open"]
        assert rows["internal"][0] == 0 and rows["internal"][2] > 0  # only the cohort reached Kimi K3
        assert rows["closed"][0] == rows["closed"][2] == 0
    assert "Admission of kimi-prod is now closed: users get the fallback model (kimi-fallback)" in out
    assert "its reservation ends in 4 d 23 h" in out  # the closing announcement


def test_demo_shows_the_reservation_countdown_and_alert(demo_run: subprocess.CompletedProcess[str]) -> None:
    out = demo_run.stdout
    assert "ends in 5.0 days" in out and "alert at 7 days" in out
    assert "*5.0 days left*" in out  # /kimi reservations


def test_demo_refuses_self_approval_and_shows_who_approved(demo_run: subprocess.CompletedProcess[str]) -> None:
    out = demo_run.stdout
    assert "you requested deployment #1; someone else must approve its gates on kimi-prod" in out
    assert "approved: artifact @U0APPROVER1, infrastructure @U0APPROVER2, model @U0APPROVER1, traffic @U0APPROVER2" in out


def test_demo_shows_real_gate_measurements_and_probe_history(demo_run: subprocess.CompletedProcess[str]) -> None:
    out = demo_run.stdout
    assert "9/9 cases passed" in out and "vs production kimi-k3-2026-08-01" in out  # the model gate, measured
    assert "knee at " in out and "proposing " in out  # the traffic gate's sweep found the stand-in's limit
    assert "*recent probes:* ✅" in out  # /kimi status after the scheduled readiness probes
    accepted = re.search(r"You accepted maxConcurrentRequests (\d+), maxQueueSize (\d+)", out)
    assert accepted  # the approver took the measured limits…
    # …which /kimi status shows as the limits the cluster runs
    assert re.search(rf"{accepted[1]} concurrent, queue {accepted[2]}(, overflow \d+)? \(accepted from a traffic gate\)", out)
    assert "readiness-probe: kimi-prod: answered: first token" in out


def test_demo_shows_a_long_context_heavy_mix_asking_for_a_review_and_lowering_the_knee(
        demo_run: subprocess.CompletedProcess[str]) -> None:
    out = demo_run.stdout
    # The metrics watch read production's mix from vLLM's histograms and asked for a capacity review, once.
    assert out.count("capacity review due: p90 prompt") >= 1 and "long-context share 0% →" in out
    assert "live mix: metrics, " in out  # /kimi capacity
    first, second = _traffic_gate(out, 1), _traffic_gate(out, 2)
    # Deploy #1's sweep sent the fixed prompt; deploy #2's replayed that mix, and its report says so beside production's.
    assert "*Mix* replayed: fixed mix" in first and "production: no mix known yet (fixed prompt)" in first
    assert "*Mix* replayed: metrics mix" in second and "production: metrics, " in second
    assert "long-context (≥32,768) 40%" in second
    # Its knee is below the first release's, so it proposes less than the limits accepted then and offers to accept
    # them with the approval (a plain Approve would be refused), which the approver pressed.
    knees = [re.search(r"knee at (\d+) \(", gate) for gate in (first, second)]
    assert knees[0] and knees[1] and int(knees[1][1]) < int(knees[0][1]), knees
    assert "Accept limits and approve" in second
    accepted = re.search(r"Limits accepted by @U0APPROVER1 .*?: maxConcurrentRequests (\d+), maxQueueSize \d+ "
                         r"\(was (\d+) / \d+\)", out)
    assert accepted and int(accepted[1]) < int(accepted[2]), accepted


def _traffic_gate(out: str, deployment: int) -> str:
    """The traffic gate message of ``deployment`` as first posted: from its heading to its buttons."""
    start = out.index(f"== Traffic gate · deployment #{deployment} ==")
    return out[start:out.index("Show every check", start)]


def test_demo_shows_a_burn_rate_page_with_its_buttons_and_its_recovery(demo_run: subprocess.CompletedProcess[str]) -> None:
    out = demo_run.stdout
    assert "metrics-watch: kimi-prod: sampled; burn-page:errors opened" in out
    alert = out[out.index("burn-page:errors: error rate (5xx)"):]
    assert re.search(r"\[\d+\] Acknowledge  \[\d+\] Silence…  \[\d+\] Roll back", alert[:1000])
    assert "burn-page:errors recovered" in out and "[file slo-kimi-prod-" in out


def test_demo_shows_a_drill_with_its_approver_and_recovery_time(demo_run: subprocess.CompletedProcess[str]) -> None:
    out = demo_run.stdout
    drill = out[out.index("An availability drill"):]
    assert "you asked for drill #1; someone else must approve or reject it" in drill
    assert re.search(r"drill #1 \(pod-deletion on `kimi-prod`\) passed: detected after \d+ s, recovered after \d+ s; "
                     r"alerts: readiness", drill)
    assert "readiness: not answering (drill #1, pod-deletion)" in drill


def test_sandbox_console_takes_typed_commands_and_buttons(demos: dict[str, Demo]) -> None:
    run = _finished(demos["console"])
    home = demos["console"][1]
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "*kimi-k3-2026-09-01*" in run.stdout and "*kimi-k3-2026-08-01*" in run.stdout
    assert "Approved by @U0APPROVER1" in run.stdout  # button [1] was the artifact gate's Approve
    assert "== Infrastructure gate · deployment #1 ==" in run.stdout
    assert "you need the deployer role to deploy" in run.stdout  # the approver may not deploy
    assert "Users reach kimi-prod through the gateway stand-in at http://127.0.0.1:" in run.stdout
    assert (home / ".kimi-ops" / "sandbox" / "sandbox.db").exists()
