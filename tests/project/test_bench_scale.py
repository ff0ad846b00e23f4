"""``bench/history_scale.py`` and ``bench/fleet_scale.py`` run as documented and print their tables with the goals.

Tiny sizes only (CI time): the figures are not asserted, only that each call, baseline and goal is reported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(script: str, *args: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_"))}
    run = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, env=env,
                         cwd=cwd, timeout=280)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run.stdout


def test_history_scale_prints_each_call_beside_its_baseline_and_the_goals(tmp_path: Path) -> None:
    out = _run("history_scale.py", "--sizes", "10,20", "--repeat", "1", "--no-postgres", cwd=tmp_path)
    rows = [line.split() for line in out.splitlines() if line.startswith("sqlite")]
    calls = {" ".join(r[1:-10]): r for r in rows}
    judged = ["status", "history 50", "gates", "App Home", "jobs list"]
    assert list(calls) == [*judged, "cold start before 0017"]  # the old lookup, timed on the same data
    assert all(calls[c][-1] in ("ok", "MISSED") and int(calls[c][-7]) > 0 for c in judged)  # a verdict, stmts counted
    assert " ".join(calls["cold start before 0017"][-4:]) == "(measured beside the goals)"  # reported, not judged
    assert "goals: each call under 50 ms at 20 deployments" in out


def test_fleet_scale_prints_probe_watch_and_pages_beside_their_baselines_on_both_databases(tmp_path: Path) -> None:
    postgres = os.environ.get("KIMI_TEST_POSTGRES_URL", "postgresql+psycopg://root@127.0.0.1:5432/root")
    out = _run("fleet_scale.py", "--sizes", "1,2", "--completion-seconds", "0.01", "--repeat", "1",
               "--postgres", postgres, cwd=tmp_path)
    rows = [line.split() for line in out.splitlines() if line.startswith(("sqlite ", "postgresql "))]
    assert [(r[0], int(r[1])) for r in rows] == [("sqlite", 1), ("sqlite", 2), ("postgresql", 1), ("postgresql", 2)]
    assert all(len(r) == 12 for r in rows)
    for backend in ("sqlite", "postgresql"):
        assert f"{backend}: goals at 2 endpoints: probe inside one period" in out
    assert out.count("status under 300 ms") == 2


def test_metrics_watch_bench_prints_each_run_beside_the_bare_scrapes(tmp_path: Path) -> None:
    out = _run("metrics_watch.py", "--endpoints", "3", "--runs", "1", cwd=tmp_path)
    lines = out.splitlines()
    assert lines[0].split()[-2:] == ["×", "baseline"]
    assert lines[1].startswith("baseline: scrapes only") and lines[2].startswith("watch run 1")
    assert "3 endpoints, 1 runs, 3 samples stored" in out
