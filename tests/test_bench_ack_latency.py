"""``bench/ack_latency.py`` runs as documented and prints its table (shape only: timings are not asserted)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Runs the benchmark script end to end in a subprocess.
pytestmark = pytest.mark.timeout(300)

BENCH = Path(__file__).resolve().parents[1] / "bench" / "ack_latency.py"


def test_the_benchmark_prints_p50_p99_and_the_ratio_to_a_bare_bolt_app(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_"))}
    run = subprocess.run([sys.executable, str(BENCH), "--requests", "10"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    lines = run.stdout.splitlines()
    header = lines[0].split()
    assert "kimi" in header and "bare" in header and header[-4:] == ["p50", "ratio", "p99", "ratio"]
    rows = [line for line in lines[1:] if line.startswith(("slash command", "button click"))]
    seen = set()
    for row in rows:
        words = row.split()
        kind, clients = " ".join(words[:2]), int(words[2])
        numbers = [float(w) for w in words[3:]]
        assert len(numbers) == 7 and all(math.isfinite(n) and n >= 0 for n in numbers), row  # n, 4 timings, 2 ratios
        seen.add((kind, clients))
    assert seen == {(k, c) for k in ("slash command", "button click") for c in (1, 10, 50)}
    assert "worst kimi-ops p99" in run.stdout and "Slack's limit: 3000 ms" in run.stdout
