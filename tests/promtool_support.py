"""The real Prometheus tools for tests: ``promtool``, ``prometheus`` and ``alertmanager`` from the PATH.

``.ci/run`` installs them (Debian's ``prometheus`` and ``prometheus-alertmanager``; the latter's binary is
``prometheus-alertmanager``). Elsewhere a test that needs one is skipped with how to get it; under CI
(``CI`` set) a missing tool fails the test instead, so CI never passes without running them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

NAMES = {"promtool": ("promtool",), "prometheus": ("prometheus",),
         "alertmanager": ("alertmanager", "prometheus-alertmanager")}
HOW = ("install them: `apt-get install prometheus prometheus-alertmanager` (Debian/Ubuntu), `brew install prometheus "
       "alertmanager`, or the release archives at https://prometheus.io/download/ (docs/alerting.md)")


def tool(name: str) -> str:
    """The path of ``name``; skipped outside CI, failed under CI, when it is not installed."""
    for candidate in NAMES[name]:
        if found := shutil.which(candidate):
            return found
    if os.environ.get("CI"):
        pytest.fail(f"{name} is not on the PATH under CI; .ci/run installs it")
    pytest.skip(f"{name} is not on the PATH; {HOW}")


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, cwd=cwd, timeout=300, check=False)


def check_rules(path: Path) -> None:
    """``promtool check rules`` must pass on ``path``."""
    done = promtool("check", "rules", str(path))
    assert done.returncode == 0, f"promtool check rules {path.name}:\n{done.stdout}\n{done.stderr}"


def write_yaml(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False, width=1_000_000), encoding="utf-8")
    return path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Alertmanager:
    """A real Alertmanager on 127.0.0.1 (no cluster), routing every alert to one webhook URL with a bearer token."""

    def __init__(self, workdir: Path, webhook_url: str, token: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "route": {"receiver": "kimi-ops", "group_by": ["endpoint", "kimi_ops_kind"], "group_wait": "0s",
                      "group_interval": "500ms", "repeat_interval": "1s"},  # a repeat every 1-1.5 s
            "receivers": [{"name": "kimi-ops", "webhook_configs": [{
                "url": webhook_url, "send_resolved": True,
                "http_config": {"authorization": {"type": "Bearer", "credentials": token}}}]}],
        }
        write_yaml(workdir / "alertmanager.yml", config)
        self.log = (workdir / "alertmanager.log").open("w")
        self.process = subprocess.Popen(
            [tool("alertmanager"), f"--config.file={workdir / 'alertmanager.yml'}", f"--storage.path={workdir / 'am-data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="],
            stdout=self.log, stderr=subprocess.STDOUT)
        # One client for every look: the tests poll these, and each new client builds its TLS context (20 ms).
        self.client = httpx.Client(timeout=10)

    def ready(self) -> bool:
        try:
            return self.client.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def notifications(self) -> float:
        """Webhook notifications Alertmanager has sent (its own counter)."""
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(self.client.get(f"{self.url}/metrics", timeout=5).text):
            for sample in family.samples:
                if sample.name == "alertmanager_notifications_total" and sample.labels.get("integration") == "webhook":
                    return float(sample.value)
        return 0.0

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.client.close()
        self.log.close()
