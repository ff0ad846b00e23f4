"""``kimi-ops serve`` and its worker end together: kill -9 of ``serve`` at any moment of start-up leaves no process.

A worker that outlived its server used to spin on its closed nudge pipe at 100% of a core, for ever (issue 31).
Each case starts a real ``serve`` over HTTP against the Slack stub and SQLite, kills it with SIGKILL at one moment
of its start-up, and then finds no process left whose environment names the case's data directory (``serve``
hands its environment to the worker), so none is left to spin either.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.sandbox.slack_stub import SlackStub
from tests.slack.test_serve import env_for
from tests.world_support import wait_until


def _processes_naming(data_dir: Path) -> list[int]:
    """The live processes whose environment carries ``KIMI_DATA_DIR=data_dir`` (a serve, its worker)."""
    marker = f"KIMI_DATA_DIR={data_dir}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes() and (entry / "stat").read_text().split(") ")[1][0] != "Z":
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def _children(pid: int) -> list[int]:
    """``pid``'s child processes, whichever of its threads started them."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _worker_started(serve: subprocess.Popen[str]) -> Callable[[], bool]:
    return lambda: bool(_children(serve.pid))


def _worker_importing(serve: subprocess.Popen[str]) -> Callable[[], bool]:
    """The worker has run its first instruction and is loading kimi-ops (its command line is Python's ``-c``)."""
    def importing() -> bool:
        for child in _children(serve.pid):
            try:
                if len((Path(f"/proc/{child}/maps")).read_text().splitlines()) > 60:  # modules beyond the bare interpreter
                    return True
            except OSError:
                continue
        return False

    return importing


def _serving(serve: subprocess.Popen[str]) -> Callable[[], bool]:
    assert serve.stdout is not None
    return lambda: "serving on" in serve.stdout.readline()  # type: ignore[union-attr]


MOMENTS: dict[str, Callable[[subprocess.Popen[str]], Callable[[], bool]]] = {
    "before the worker is started": lambda serve: lambda: True,
    "as the worker process appears": _worker_started,
    "while the worker loads its modules": _worker_importing,
    "once serve answers": _serving,
}


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_killing_serve_at_any_moment_of_its_start_leaves_no_process(tmp_path: Path, moment: str) -> None:
    with SlackStub() as stub:
        env = env_for(tmp_path, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="orphan-test-secret",
                      KIMI_SLACK_API_URL=stub.api_url, KIMI_DATABASE_URL=f"sqlite:///{tmp_path / 'kimi.db'}")
        serve = subprocess.Popen([sys.executable, "-c", "from bot.cli.main import main; main()", "serve", "--host",
                                  "127.0.0.1", "--port", "0", "--no-jobs"], env=env, cwd=tmp_path, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            wait_until(f"serve's start to reach the moment {moment!r}", MOMENTS[moment](serve), timeout=120, poll=0.005)
            os.kill(serve.pid, signal.SIGKILL)
            serve.wait(timeout=90)
            left = wait_until("every process of the killed serve gone",
                              lambda: not _processes_naming(tmp_path / "data") or [], timeout=60)
            assert left is True
        finally:
            for pid in _processes_naming(tmp_path / "data"):
                os.kill(pid, signal.SIGKILL)
            if serve.poll() is None:
                serve.kill()
                serve.wait()
