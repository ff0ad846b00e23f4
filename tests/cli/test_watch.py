"""``--watch``: a terminal follows a deployment another process drives, line by line, from what it records.

The watcher is the real ``kimi-ops`` reading the same database while this test drives the deployment with the
engine on the workflow doubles and decides its gates, each only once the watcher has said the gate waits.
Bad input is run in process: one line, the CLI's exit code, nothing else.
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from collections.abc import Callable
from itertools import cycle
from pathlib import Path

import pytest

from bot.services.deployments import decide_gate, request_deploy
from bot.services.progress import last_event, progress_since
from tests.cli_support import KIMI_OPS, run_in_process
from tests.workflow_support import ADMIN, APPROVER_1, REQUESTER, workflow

pytestmark = pytest.mark.sqlite_only

WAIT_GUARD = 120  # seconds before a watcher that says nothing more fails the test (never reached when it works)


def _env(ctx) -> dict[str, str]:
    return {"KIMI_DATABASE_URL": ctx.settings.effective_database_url, "KIMI_DATA_DIR": str(ctx.settings.data_dir),
            "COLUMNS": "200", "NO_COLOR": "1"}


class Lines:
    """A running ``kimi-ops``'s stdout, line by line, as it prints them."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert process.stdout is not None
        stdout = process.stdout

        def read() -> None:
            for line in stdout:
                self._queue.put(line.rstrip("\n"))
            self._queue.put(None)

        threading.Thread(target=read, daemon=True).start()

    def until(self, wanted: Callable[[str], bool]) -> str:
        """The first new line ``wanted`` accepts (the lines before it are kept in :attr:`seen`)."""
        while True:
            line = self._queue.get(timeout=WAIT_GUARD)
            assert line is not None, f"the watcher stopped before the line wanted; it said: {self.seen}"
            self.seen.append(line)
            if wanted(line):
                return line

    def rest(self) -> list[str]:
        while (line := self._queue.get(timeout=WAIT_GUARD)) is not None:
            self.seen.append(line)
        return self.seen


def test_status_watch_prints_each_recorded_step_of_a_deploy_driven_elsewhere_and_exits_0_when_live(
        make_ctx, tmp_path: Path) -> None:
    ctx, engine = workflow(make_ctx)
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    assert view.state == "artifact_gate"
    before = last_event(ctx, view.id)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "AWS_", "SLACK_"))} | _env(ctx)
    watcher = subprocess.Popen([str(KIMI_OPS), "status", "kimi-prod", "--watch"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        lines = Lines(watcher)
        header = lines.until(lambda _: True)
        assert header == (f"deployment #{view.id}: deploy of rel-a on kimi-prod, requested by {REQUESTER.user_id}; "
                          "now artifact gate (following it)")
        approvers = cycle((APPROVER_1, ADMIN))
        gates = []
        while view.state != "live":
            assert view.pending is not None and view.pending.approvable, view
            gate = view.pending.gate
            said = lines.until(lambda line, gate=gate: line.startswith(f"  waiting: the {gate} gate waits"))
            assert f"`kimi-ops gate approve {view.id} {gate} --as <approver>`" in said
            assert f"`kimi-ops gate report {view.id} {gate}`" in said
            gates.append(gate)
            decide_gate(ctx, view.id, gate, "approved", next(approvers), seen_report_hash=view.pending.report_hash,
                        seen_release_hash=view.pending.release_hash)
            view = engine.advance(view.id)
        printed = lines.rest()
        assert watcher.wait(timeout=WAIT_GUARD) == 0, watcher.stderr.read() if watcher.stderr else ""
    finally:
        if watcher.poll() is None:
            watcher.kill()
        watcher.communicate()  # waits, and closes its pipes
    assert gates == ["artifact", "infrastructure", "model", "traffic"]
    # Every step recorded after the watch began, in the order recorded, each once, then the verdict.
    steps = [line[12:] for line in printed if line.startswith("  ") and line[2:10].count(":") == 2]
    assert steps == [p.text for p in progress_since(ctx, view.id, before)]
    assert steps[-1].startswith("→ live")
    assert printed[-1] == f"deployment #{view.id} is live: rel-a on kimi-prod"
    # Each gate's wait is said once, after the step into it and before the step out of it.
    for gate in gates[1:]:
        into = next(i for i, p in enumerate(printed) if f"→ {gate} gate" in p)
        waits = [i for i, p in enumerate(printed) if p.startswith(f"  waiting: the {gate} gate")]
        assert len(waits) == 1 and into < waits[0] < next(i for i in range(into + 1, len(printed)) if "  → " in printed[i])


def test_a_watch_at_a_gate_says_how_to_decide_it_and_stops_at_its_timeout(make_ctx, tmp_path: Path) -> None:
    ctx, engine = workflow(make_ctx)
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    done = run_in_process(["gate", "show", str(view.id), "--watch", "--timeout", "1"], _env(ctx), tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines()[1:] == [
        f"  waiting: the artifact gate waits for an approver: the buttons in its Slack thread, or `kimi-ops gate approve "
        f"{view.id} artifact --as <approver>` (`kimi-ops gate reject {view.id} artifact --reason …` to stop it); its "
        f"report: `kimi-ops gate report {view.id} artifact`"]
    assert done.stderr.strip() == (f"error: deployment #{view.id} is still in its `artifact gate` step after 1 s; "
                                   "stopped watching (the deployment carries on)")


def test_a_watch_of_a_deployment_that_ended_without_going_live_says_how_and_exits_1(make_ctx, tmp_path: Path) -> None:
    ctx, engine = workflow(make_ctx)
    view = engine.advance(request_deploy(ctx, "rel-a", "kimi-prod", REQUESTER).id)
    decide_gate(ctx, view.id, "artifact", "rejected", APPROVER_1, seen_report_hash=view.pending.report_hash,
                seen_release_hash=view.pending.release_hash, reason="wrong weights")
    done = run_in_process(["gate", "show", str(view.id), "--watch"], _env(ctx), tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"deployment #{view.id}: deploy of rel-a on kimi-prod, requested by "
                                        f"{REQUESTER.user_id}; now rejected"]
    assert done.stderr.startswith(f"error: deployment #{view.id} ended rejected") and "wrong weights" in done.stderr


@pytest.mark.parametrize(("argv", "code", "said"), [
    (["gate", "show", "99", "--watch"], 1, "error: no deployment #99"),
    (["status", "nope", "--watch"], 1, "error: no endpoint named nope"),
    (["status", "kimi-prod", "--watch", "-o", "json"], 2, "error: --watch prints lines as they are recorded and -o json"),
    (["gate", "show", "1", "--timeout", "5"], 2, "error: --timeout bounds --watch"),
])
def test_bad_input_to_a_watch_is_one_line_and_the_cli_exit_code(make_ctx, tmp_path: Path, argv: list[str], code: int,
                                                               said: str) -> None:
    ctx, _ = workflow(make_ctx)
    done = run_in_process(argv, _env(ctx), tmp_path)
    assert done.returncode == code
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith(said), done.stderr
    assert not done.stdout and "Traceback" not in done.stderr


def test_a_watch_of_an_endpoint_with_nothing_in_flight_says_so_and_exits_0(make_ctx, tmp_path: Path) -> None:
    ctx, _ = workflow(make_ctx)
    done = run_in_process(["status", "kimi-prod", "--watch"], _env(ctx), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no deployment in flight on kimi-prod; `kimi-ops history kimi-prod` lists the last ones"
