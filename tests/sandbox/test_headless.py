"""``kimi-ops sandbox --headless``: the stand-ins without a console, and the exports that aim other processes at them."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.slack.test_serve import env_for

CLI = [sys.executable, "-c", "from bot.cli.main import main; main()"]
READY_LINE = "# the sandbox is running"


def read_exports(proc: subprocess.Popen[str], limit: float = 240.0) -> dict[str, str]:
    """The ``export NAME=value`` lines printed before the sandbox says it runs (a watchdog stops a stuck start)."""
    watchdog = threading.Timer(limit, proc.kill)
    watchdog.start()
    exports: dict[str, str] = {}
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith(READY_LINE):
                return exports
            assert line.startswith("export "), f"stdout holds only exports and comments, not {line!r}"
            name, _, value = line.removeprefix("export ").rstrip("\n").partition("=")
            (exports[name],) = shlex.split(value)
    finally:
        watchdog.cancel()
    raise AssertionError(f"the sandbox stopped before it ran: {proc.stderr.read()}")  # type: ignore[union-attr]


def test_headless_sandbox_prints_exports_that_aim_the_cli_at_it_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen([*CLI, "sandbox", "--headless"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=env_for(tmp_path))
    try:
        exports = read_exports(proc)
        assert {"KIMI_DATABASE_URL", "KIMI_CONFIG", "KUBECONFIG", "AWS_ENDPOINT_URL", "KIMI_SLACK_API_URL",
                "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"} <= set(exports)
        # A second process knows nothing but the exports (env_for starts from a clean environment).
        other = {**env_for(tmp_path / "elsewhere"), **exports}
        status = subprocess.run([*CLI, "status"], capture_output=True, text=True, env=other, cwd=tmp_path, timeout=120)
        assert status.returncode == 0, status.stderr
        assert "kimi-prod" in status.stdout and "admission" in status.stdout
        release = subprocess.run([*CLI, "release", "show", "kimi-k3-2026-08-01"], capture_output=True, text=True,
                                 env=other, cwd=tmp_path, timeout=120)
        assert release.returncode == 0, release.stderr  # the sandbox's seeded release, in its database
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()  # never leave a sandbox running behind a failed test
            proc.wait(timeout=30)
            raise
    stderr = proc.stderr.read()  # type: ignore[union-attr]
    assert proc.returncode == 0 and "the sandbox stopped" in stderr and "Traceback" not in stderr
