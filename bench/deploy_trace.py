"""Trace one ``/kimi deploy`` through ``kimi-ops serve`` as production runs it (issue 29's re-measurable trace).

The sandbox's stand-ins and a Slack Web API stand-in run in this process; ``kimi-ops serve`` runs as a process of its
own, with its worker beside it, exactly as a replica runs. Both of serve's processes load a small tracer
(``sitecustomize`` on ``PYTHONPATH``, written to a temporary directory; nothing in kimi-ops knows of it) that, between
two signals from this bench, records every project file whose code is called, every thread that calls it and every
database transaction begun. The window opens just before the signed ``/kimi deploy`` is sent and closes when the
first gate message reaches the Slack stand-in, so start-up is not counted: what is counted is what one command
passes through on its way to the first gate a person decides.

    .venv/bin/python bench/deploy_trace.py [--files]

Goal (issue 29): at most 25 project files, one Bolt pass (a single process runs Bolt for the request).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.sandbox.slack_stub import SlackSender, SlackStub
from bot.sandbox.stack import DEPLOYER, ENDPOINT, Sandbox

REPO = Path(__file__).resolve().parents[1]
PROJECT = tuple(str(REPO / part) + os.sep for part in ("bot", "commands", "jobs"))
RELEASE = "kimi-k3-2026-08-01"
SECRET = "trace-signing-secret"
GOAL_FILES = 25

# Loaded by both of serve's processes; SIGUSR1 opens the window, SIGUSR2 closes it and writes what it saw.
TRACER = '''
import json, os, signal, sys, threading

_out = os.environ.get("KIMI_TRACE_DIR")
if _out:
    _seen = {"files": set(), "threads": set(), "transactions": 0, "bolt": 0, "on": False}

    def _profile(frame, event, arg):
        if event == "call" and _seen["on"]:
            _seen["files"].add(frame.f_code.co_filename)
            _seen["threads"].add(threading.get_ident())
            if frame.f_code.co_name == "dispatch" and "slack_bolt" in frame.f_code.co_filename:
                _seen["bolt"] += 1

    def _begin(*_args):
        if _seen["on"]:
            _seen["transactions"] += 1

    def _open(*_):
        _seen["files"].clear(); _seen["threads"].clear(); _seen["transactions"] = 0; _seen["bolt"] = 0
        if "sqlalchemy" in sys.modules:
            from sqlalchemy import event
            from sqlalchemy.engine import Engine
            if not event.contains(Engine, "begin", _begin):
                event.listen(Engine, "begin", _begin)
        _seen["on"] = True

    def _close(*_):
        _seen["on"] = False
        with open(os.path.join(_out, f"{os.getpid()}.json"), "w") as f:
            json.dump({"pid": os.getpid(), "argv": sys.argv, "files": sorted(_seen["files"]),
                       "threads": len(_seen["threads"]), "transactions": _seen["transactions"],
                       "bolt_dispatches": _seen["bolt"]}, f)

    signal.signal(signal.SIGUSR1, _open)
    signal.signal(signal.SIGUSR2, _close)
    sys.setprofile(_profile)
    threading.setprofile(_profile)
'''


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(c) for c in text]
    return found


T = TypeVar("T")


def wait_for(what: str, condition: Callable[[], T], timeout: float = 300.0) -> T:
    deadline = time.monotonic() + timeout
    while not (seen := condition()):
        if time.monotonic() > deadline:
            raise SystemExit(f"no {what} within {timeout:g} s")
        time.sleep(0.05)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", action="store_true", help="list the project files each process passed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kimi-trace-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "tracer").mkdir()
        (tmp / "tracer" / "sitecustomize.py").write_text(TRACER)
        (tmp / "out").mkdir()
        sandbox = Sandbox(tmp / "sandbox").start()
        stub = SlackStub().start()
        serve: subprocess.Popen[str] | None = None
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_", "AWS_"))}
            env.update(sandbox.environment(tmp / "kubeconfig"))
            env.update(SLACK_BOT_TOKEN="xoxb-trace", SLACK_SIGNING_SECRET=SECRET, KIMI_SLACK_API_URL=stub.api_url,
                       KIMI_TRACE_DIR=str(tmp / "out"), PYTHONPATH=os.pathsep.join([str(tmp / "tracer"), str(REPO)]))
            env["KIMI_DATA_DIR"] = str(tmp / "replica")  # the replica's own directory; the database is the sandbox's
            serve = subprocess.Popen([sys.executable, "-c", "from bot.cli.main import main; main()", "serve",
                                      "--host", "127.0.0.1", "--port", "0", "--no-jobs"],
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=tmp)
            assert serve.stdout is not None
            url = re.search(r"serving on (http://127\.0\.0\.1:\d+)", serve.stdout.readline())
            if url is None:
                raise SystemExit("serve did not say where it serves")
            base = url.group(1)
            wait_for("ready replica", lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200)
            pids = [serve.pid, *children(serve.pid)]
            for pid in pids:
                os.kill(pid, signal.SIGUSR1)
            time.sleep(0.5)  # each process's main thread takes its signal
            sender = SlackSender(SECRET, stub)
            body = sender.slash(DEPLOYER, f"deploy {RELEASE} to {ENDPOINT}")
            started = time.monotonic()
            answer = httpx.post(f"{base}/slack/events", content=body.encode(), headers=sender.headers(body), timeout=30)
            wait_for("first gate message", lambda: any("gate · deployment #" in str(m.blocks) for m in stub.messages))
            elapsed = time.monotonic() - started
            for pid in pids:
                os.kill(pid, signal.SIGUSR2)
            out = tmp / "out"
            wait_for("trace reports", lambda: len(list(out.glob("*.json"))) == len(pids))
            time.sleep(0.2)  # each report is written whole before the next signal's; give the last one its close
            reports: list[dict[str, Any]] = [json.loads(p.read_text()) for p in out.glob("*.json")]
        finally:
            if serve is not None:
                serve.send_signal(signal.SIGTERM)
                serve.wait(timeout=120)
            stub.stop()
            sandbox.stop()
    report(reports, answer.status_code, elapsed, args.files)


def report(reports: list[dict[str, Any]], status: int, elapsed: float, list_files: bool) -> None:
    union: set[str] = set()
    print(f"/kimi deploy {RELEASE} to {ENDPOINT}: HTTP {status}, first gate message after {elapsed:.1f} s\n")
    print(f"{'process':<34} {'project files':>13} {'threads':>8} {'db transactions':>16} {'Bolt passes':>12}")
    busy = 0
    for r in sorted(reports, key=lambda r: int(r["pid"])):
        files = [f for f in r["files"] if f.startswith(PROJECT)]
        if not files:
            continue
        busy += 1
        union |= set(files)
        argv = " ".join(a for a in r["argv"][1:] if not a.startswith("-"))[:34]
        print(f"{argv or 'serve':<34} {len(files):>13} {r['threads']:>8} {r['transactions']:>16} {r['bolt_dispatches']:>12}")
        if list_files:
            for f in files:
                print(f"    {os.path.relpath(f, REPO)}")
    bolt = sum(1 for r in reports if int(r["bolt_dispatches"]) > 0)
    print(f"\n{len(union)} project files in {busy} processes (goal: at most {GOAL_FILES}: "
          f"{'met' if len(union) <= GOAL_FILES else 'missed'}); Bolt ran in {bolt} process(es) (goal: 1: "
          f"{'met' if bolt == 1 else 'missed'})")


if __name__ == "__main__":
    main()
