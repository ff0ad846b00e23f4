"""An outside system that does not answer when a command starts is named in one line, never "an unexpected error".

``kimi-ops serve`` reaches Slack and the database at start (their tests: ``tests/slack/test_serve.py``, exit 2 with
one line); the Kubernetes API and AWS are reached on first use, which for these commands is at their start. Each
runs as an operator runs it, a process with the shipped example settings, against a port nothing listens on.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as probe:  # bound, never listening: a connection to it is refused
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _kimi_ops(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_", "AWS_", "KUBECONFIG"))}
    env.update(KIMI_CONFIG=str(REPO / "deploy" / "kimi-ops.example.yaml"), KIMI_DATA_DIR=str(tmp_path / "data"),
               KIMI_DATABASE_URL=f"sqlite:///{tmp_path / 'kimi.db'}", KIMI_AUTO_MIGRATE="1", **extra)
    return subprocess.run([sys.executable, "-c", "from bot.cli.main import main; main()", *args], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)


def _named(done: subprocess.CompletedProcess[str]) -> str:
    everything = done.stdout + done.stderr
    assert "unexpected error" not in everything and "Traceback" not in everything, everything[-3000:]
    return everything


def test_the_kubernetes_api_unreachable_is_named_with_its_url(tmp_path) -> None:
    port = _closed_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: not-a-secret}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    done = _kimi_ops(tmp_path, "status", KUBECONFIG=str(kubeconfig))
    assert done.returncode == 0
    assert f"the Kubernetes API at https://127.0.0.1:{port} is unreachable (connection refused)" in _named(done)


def test_aws_unreachable_is_named_with_its_url(tmp_path) -> None:
    port = _closed_port()
    done = _kimi_ops(tmp_path, "jobs", "run", "reservation-watch", AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
                     AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                     AWS_MAX_ATTEMPTS="1")
    assert f"cannot reach the AWS endpoint at http://127.0.0.1:{port} (could not connect)" in _named(done)
