"""The test suite's CPU time per module: a pytest plugin that records it, and a report of what it recorded.

On a shared machine wall time says more about the neighbours than about the suite, so CI's speed is measured
in CPU seconds: each test's user + system time of its worker process (its threads and in-process stand-ins
included) and of the child processes it waited for (``kimi-ops`` commands, serve, promtool, the demo).

    SUITE_CPU_DIR=/tmp/cpu PYTHONPATH=. PYTEST_ADDOPTS="-p bench.suite_cpu" .ci/run   # record (any pytest run)
    .venv/bin/python bench/suite_cpu.py /tmp/cpu                                      # the table, costliest first
    .venv/bin/python bench/suite_cpu.py /tmp/cpu /tmp/cpu-before                      # beside an earlier run
    .venv/bin/python bench/suite_cpu.py /tmp/cpu --write-durations tests/durations.json  # the run's order (conftest)

Each worker appends ``node id, wall, own CPU, children's CPU, outcome`` per test to a file of its own in the directory.
A stand-in's thread that keeps running between tests is counted in whichever test is running at the time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any, TextIO

import pytest

_out: TextIO | None = None
_outcome: dict[str, str] = {}


def pytest_runtest_logreport(report: Any) -> None:
    """The test's outcome: failed if any phase failed (an error in setup included), else passed or skipped."""
    if report.failed or _outcome.get(report.nodeid) != "failed":
        _outcome[report.nodeid] = "failed" if report.failed else _outcome.get(report.nodeid, report.outcome)


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Generator[None, object, object]:
    """Around each test (setup, call, teardown): its wall time and the CPU time spent meanwhile."""
    global _out
    if _out is None:
        folder = Path(os.environ.get("SUITE_CPU_DIR", "suite-cpu"))
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.tsv"
        _out = (folder / name).open("a", buffering=1)
    started, (own, children) = time.monotonic(), _cpu()
    result = yield
    own_after, children_after = _cpu()
    _out.write(f"{item.nodeid}\t{time.monotonic() - started:.3f}\t{own_after - own:.3f}\t"
               f"{children_after - children:.3f}\t{_outcome.pop(item.nodeid, 'unknown')}\n")
    return result


def per_module(folder: Path) -> dict[str, list[float]]:
    """Module → [tests, wall, own CPU, children's CPU], summed over every worker's file."""
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for path in folder.glob("*.tsv"):
        for line in path.read_text().splitlines():
            node, wall, own, children = line.split("\t")[:4]
            row = modules[node.split("::")[0]]
            row[0] += 1
            row[1] += float(wall)
            row[2] += float(own)
            row[3] += float(children)
    return dict(modules)


def write_durations(modules: dict[str, list[float]], target: Path) -> None:
    """Each module's wall seconds (its tests' setup, call and teardown), longest first: the order ``./dev test`` runs in."""
    walls = {module: round(row[1], 1) for module, row in sorted(modules.items(), key=lambda item: -item[1][1])}
    target.write_text(json.dumps(walls, indent=0) + "\n")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="The test suite's CPU time per module, from a recorded run.")
    parser.add_argument("run", type=Path, help="the directory a run recorded into (SUITE_CPU_DIR)")
    parser.add_argument("before", type=Path, nargs="?", help="an earlier run's directory, shown beside it")
    parser.add_argument("--write-durations", type=Path, metavar="FILE",
                        help="write each module's wall time to FILE (tests/durations.json) instead of the table")
    args = parser.parse_args(argv)
    now = per_module(args.run)
    if args.write_durations is not None:
        write_durations(now, args.write_durations)
        return
    before = per_module(args.before) if args.before is not None else {}

    def cpu(row: list[float] | None) -> float:
        return row[2] + row[3] if row else 0.0

    total = [sum(row[i] for row in now.values()) for i in range(4)]
    print(f"{int(total[0])} tests, CPU {total[2] + total[3]:.0f} s (own {total[2]:.0f} s, children {total[3]:.0f} s)"
          + (f"; before {sum(cpu(row) for row in before.values()):.0f} s" if before else ""))
    print(f"{'module':58} {'tests':>5} {'CPU s':>7} {'before':>7} {'wall s':>7}")
    for module, row in sorted(now.items(), key=lambda item: -cpu(item[1]))[:40]:
        was = f"{cpu(before[module]):7.1f}" if module in before else f"{'':7}"
        print(f"{module:58} {int(row[0]):5d} {cpu(row):7.1f} {was} {row[1]:7.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
