"""``bench/ack_latency.py`` runs as documented and prints its table (shape only: timings are not asserted)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Runs the benchmark script end to end in a subprocess.
pytestmark = pytest.mark.timeout(600)

BENCH = Path(__file__).resolve().parents[2] / "bench" / "ack_latency.py"


def test_the_benchmark_prints_p50_p99_and_the_ratio_to_a_bare_bolt_app(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_"))}
    # The suite loads every core: a Slack stand-in at the lowest priority (the benchmark's default) would wait
    # behind it, and the follow-ups with it.
    run = subprocess.run([sys.executable, str(BENCH), "--requests", "10", "--rounds", "1", "--slack-niceness", "0"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    lines = run.stdout.splitlines()
    header = lines[0].split()
    assert {"bare", "inline", "worker", "ratio", "goal"} <= set(header), lines[0]
    rows = [line for line in lines[1:] if line.startswith(("slash command", "button click"))]
    seen = set()
    for row in rows:
        words = row.split()
        kind, clients = " ".join(words[:2]), int(words[2])
        # n, then bare, inline and worker p50/p99, then the inline and worker ratios to bare: each a p50/p99 pair
        pairs = [tuple(float(x) for x in w.split("/")) for w in words[4:9]]
        assert int(words[3]) > 0 and len(pairs) == 5, row
        assert all(len(p) == 2 and all(math.isfinite(x) and x >= 0 for x in p) for p in pairs), row
        (b50, b99), _inline, (w50, w99), _inline_ratio, (r50, r99) = pairs
        assert w50 <= w99 and b50 <= b99, row
        # The ratios are the worker's over bare (from unrounded figures: the printed milliseconds have one decimal).
        assert math.isclose(r50, w50 / b50, rel_tol=0.2) and math.isclose(r99, w99 / b99, rel_tol=0.2), row
        # The goal restated in issue 36: a margin in ms over the bare app, p99 at 50 clients, p50 below.
        goal, met = (("p99 <= bare+100ms", w99 <= b99 + 100) if clients >= 50 else ("p50 <= bare+5ms", w50 <= b50 + 5))
        assert goal in row and words[-1] in ("ok", "MISSED"), row
        # The verdict follows the margin (a printed figure is rounded to 0.1 ms: skip a verdict on the edge).
        edge = abs((w99 - b99 - 100) if clients >= 50 else (w50 - b50 - 5)) < 0.2
        assert edge or (words[-1] == "ok") == met, row
        seen.add((kind, clients))
    assert seen == {(k, c) for k in ("slash command", "button click") for c in (1, 10, 50)}
    assert "worst kimi-ops p99" in run.stdout and "Slack's limit: 3000 ms" in run.stdout
