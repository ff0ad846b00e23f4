"""A real Prometheus and Alertmanager beside the sandbox (``kimi-ops sandbox --prometheus``), when both are installed.

Prometheus scrapes the model servers' ``/metrics`` (each target labelled ``namespace``/``pod`` as a pod of its
endpoint would be, so the rendered rules' default selector finds it) every second, evaluates the rules kimi-ops
renders for the endpoint every second, and sends its alerts to Alertmanager, which routes them to kimi-ops's
webhook with the bearer token. A sandbox runs in minutes, so the intervals are a second where production uses
15–60 s; the rules are exactly those ``kimi-ops slo rules`` prints.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

PROMETHEUS = ("prometheus",)
ALERTMANAGER = ("alertmanager", "prometheus-alertmanager")  # Debian names its binary prometheus-alertmanager
INSTALL = ("install Prometheus and Alertmanager (Debian/Ubuntu: apt-get install prometheus prometheus-alertmanager; "
           "macOS: brew install prometheus alertmanager; or https://prometheus.io/download/)")


def _instant(stamp: str) -> dt.datetime:
    """Prometheus's RFC 3339 time (nanoseconds; ``Z`` or an offset) as an aware datetime (microseconds)."""
    found = re.fullmatch(r"([^.]+?)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", stamp)
    if found is None:
        raise ValueError(f"not an RFC 3339 time: {stamp!r}")
    whole, fraction, zone = found.groups()
    return dt.datetime.fromisoformat(f"{whole}.{(fraction or '')[:6].ljust(6, '0')}{'+00:00' if zone == 'Z' else zone}")


def binaries() -> tuple[str, str] | None:
    """The paths of ``prometheus`` and Alertmanager, or None when either is not on the PATH."""
    prometheus = next((p for name in PROMETHEUS if (p := shutil.which(name))), None)
    alertmanager = next((p for name in ALERTMANAGER if (p := shutil.which(name))), None)
    return (prometheus, alertmanager) if prometheus and alertmanager else None


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusStack:
    """Prometheus and Alertmanager processes on 127.0.0.1; :meth:`stop` ends both."""

    def __init__(self, workdir: Path, *, targets: Mapping[str, str], namespace: str, rules: Mapping[str, Any],
                 webhook_url: str, token: str, alertmanager_port: int | None = None) -> None:
        found = binaries()
        if found is None:
            raise RuntimeError(f"--prometheus needs both binaries on the PATH: {INSTALL}")
        self.prometheus_bin, self.alertmanager_bin = found
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.alertmanager_port = alertmanager_port or free_port()
        self.prometheus_port = free_port()
        self.alertmanager_url = f"http://127.0.0.1:{self.alertmanager_port}"
        self.prometheus_url = f"http://127.0.0.1:{self.prometheus_port}"
        self.targets, self.namespace, self.rules = dict(targets), namespace, rules
        self.webhook_url, self.token = webhook_url, token
        self.processes: list[subprocess.Popen[bytes]] = []

    def _write(self) -> tuple[Path, Path]:
        (self.workdir / "rules.yml").write_text(yaml.safe_dump(dict(self.rules), sort_keys=False), encoding="utf-8")
        scrape = [{"job_name": endpoint, "metrics_path": "/metrics",
                   "static_configs": [{"targets": [urlsplit(url).netloc],
                                       "labels": {"namespace": self.namespace, "pod": f"{endpoint}-sandbox-0"}}]}
                  for endpoint, url in self.targets.items()]
        prometheus = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                      "rule_files": ["rules.yml"], "scrape_configs": scrape,
                      "alerting": {"alertmanagers": [{"static_configs": [
                          {"targets": [f"127.0.0.1:{self.alertmanager_port}"]}]}]}}
        alertmanager = {
            "route": {"receiver": "kimi-ops", "group_by": ["endpoint", "kimi_ops_kind"], "group_wait": "0s",
                      "group_interval": "5s", "repeat_interval": "1h"},
            "receivers": [{"name": "kimi-ops", "webhook_configs": [{
                "url": self.webhook_url, "send_resolved": True,
                "http_config": {"authorization": {"type": "Bearer", "credentials": self.token}}}]}]}
        prometheus_file, alertmanager_file = self.workdir / "prometheus.yml", self.workdir / "alertmanager.yml"
        prometheus_file.write_text(yaml.safe_dump(prometheus, sort_keys=False), encoding="utf-8")
        alertmanager_file.write_text(yaml.safe_dump(alertmanager, sort_keys=False), encoding="utf-8")
        return prometheus_file, alertmanager_file

    def start(self, timeout: float = 60.0) -> PrometheusStack:
        prometheus_file, alertmanager_file = self._write()
        log = (self.workdir / "prometheus-stack.log").open("ab")
        self.processes.append(subprocess.Popen(
            [self.alertmanager_bin, f"--config.file={alertmanager_file}", f"--storage.path={self.workdir / 'am'}",
             f"--web.listen-address=127.0.0.1:{self.alertmanager_port}", "--cluster.listen-address="],
            stdout=log, stderr=subprocess.STDOUT))
        self.processes.append(subprocess.Popen(
            [self.prometheus_bin, f"--config.file={prometheus_file}", f"--storage.tsdb.path={self.workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.prometheus_port}"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir))
        log.close()
        deadline = time.monotonic() + timeout
        for url in (self.alertmanager_url, self.prometheus_url):
            while not self._ready(url):
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                    self.stop()
                    raise RuntimeError(f"{url} did not become ready; see {self.workdir / 'prometheus-stack.log'}")
                time.sleep(0.2)
        return self

    @staticmethod
    def _ready(url: str) -> bool:
        try:
            return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def firing(self) -> list[dict[str, str]]:
        """The labels of every alert Prometheus has firing now (whatever kimi-ops is doing)."""
        alerts = httpx.get(f"{self.prometheus_url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        return [dict(a["labels"]) for a in alerts if a.get("state") == "firing"]

    def evaluated_since(self, at: dt.datetime) -> bool:
        """Whether Prometheus evaluated every rule group after ``at`` (so what :meth:`firing` says is its verdict
        since then, not one it held from before)."""
        groups = httpx.get(f"{self.prometheus_url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        return bool(groups) and all(_instant(g["lastEvaluation"]) > at for g in groups)

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self.processes.clear()


# ---------------------------------------------------------------------------- the sandbox's wiring


def sandbox_overrides(alertmanager_port: int, token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Settings and endpoint overrides of a sandbox whose pages come from Alertmanager."""
    return ({"alertmanager_url": f"http://127.0.0.1:{alertmanager_port}", "alertmanager_webhook_token": token},
            {"slo": {"alerting": "prometheus"}})


def beside(ctx: Any, app: Any, workdir: Path, *, alertmanager_port: int, token: str) -> tuple[PrometheusStack, Any]:
    """Serve ``app``'s HTTP face (for the webhook) and start Prometheus and Alertmanager on ``ctx``'s endpoints."""
    from bot.services.alert_rules import render_rules
    from bot.slack.http import HttpServer

    http = HttpServer(app.wsgi(), "127.0.0.1", 0, threads=4).start()
    endpoints = list(ctx.settings.endpoints)
    names = [e.name for e in endpoints] + [s.name for s in ctx.settings.services]  # a pair's own rules too
    rules = {"groups": [g for name in names for g in render_rules(ctx, name).rules_file["groups"]]}
    try:
        stack = PrometheusStack(workdir, targets={e.name: e.url for e in endpoints}, namespace=endpoints[0].namespace,
                                rules=rules, webhook_url=f"{http.url}/alertmanager/webhook", token=token,
                                alertmanager_port=alertmanager_port).start()
    except BaseException:
        http.stop()
        raise
    return stack, http
