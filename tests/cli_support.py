"""Running the real ``kimi-ops`` console script against the sandbox's stand-ins, for whole-workflow tests.

:class:`CliSandbox` starts :class:`bot.sandbox.stack.Sandbox` (moto, the kmock
cluster with the operator simulator, the capacity stand-in, the OpenAI-compatible
server) and runs ``kimi-ops`` as separate processes aimed at it through
``Sandbox.environment``: same database, same S3/ECR, same cluster, same endpoint.

Reserved capacity is the one thing a separate process cannot reach there: moto
has no Capacity Block or training plan API, and the capacity stand-in answers
only clients built in this process. :class:`SageMakerFace` puts it on HTTP: a
small server speaking SageMaker's JSON protocol (``X-Amz-Target:
SageMaker.ListTrainingPlans`` …) that answers each call through the stand-in's
own boto3 client (so the answer is validated against AWS's model) and writes it
as AWS does. ``AWS_ENDPOINT_URL_SAGEMAKER`` aims the subprocess's unchanged
``AwsReservationSource`` at it, so the infrastructure gate runs in the
subprocess exactly as in production. (The sandbox endpoint is HyperPod, so EC2
Capacity Blocks are not served.)
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from botocore import xform_name
from botocore.exceptions import ClientError

from bot.sandbox.capacity import CapacityStandIn
from bot.sandbox.stack import ADMIN, APPROVER_1, APPROVER_2, DEPLOYER, Sandbox

KIMI_OPS = Path(sys.executable).with_name("kimi-ops")
# The CLI cannot look up Slack user groups, so the second approver is listed by user ID here.
CLI_ROLES = {"viewer": [], "deployer": [DEPLOYER], "approver": [APPROVER_1, APPROVER_2], "admin": [ADMIN]}
# A sweep that still finds the stand-in's knee (six running, two waiting) in a couple of seconds.
QUICK_SWEEP = {
    "ceiling": 16, "warmup_requests": 0, "steady_requests_per_slot": 1, "steady_seconds": 3, "burst_rounds": 0,
    "refine_steps": 0, "max_requests": 200, "max_seconds": 10, "request_timeout_seconds": 5, "max_tokens": 4,
    "prompt_words": 8, "prefix_modes": ["shared"],
}
_REGION = re.compile(r"Credential=[^/]+/\d{8}/([a-z0-9-]+)/")


def _wire(value: Any) -> Any:
    """A boto3 result as AWS's JSON protocol writes it (timestamps as epoch seconds)."""
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, Mapping):
        return {k: _wire(v) for k, v in value.items() if k != "ResponseMetadata"}
    if isinstance(value, list):
        return [_wire(v) for v in value]
    return value


class SageMakerFace:
    """SageMaker's reservation calls over HTTP, answered by a :class:`CapacityStandIn`."""

    def __init__(self, capacity: CapacityStandIn) -> None:
        self.capacity = capacity
        self.calls: list[str] = []
        face = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                target = self.headers.get("X-Amz-Target", "")
                found = _REGION.search(self.headers.get("Authorization", ""))
                status, answer = face.answer(target, json.loads(body or b"{}"), found.group(1) if found else "us-east-1")
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # quiet: the test output is the CLI's
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="sagemaker-face", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> "SageMakerFace":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, target: str, params: dict[str, Any], region: str) -> tuple[int, dict[str, Any]]:
        operation = target.removeprefix("SageMaker.")
        self.calls.append(operation)
        client = self.capacity.client("sagemaker", region)
        try:
            result = getattr(client, xform_name(operation))(**params)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            return 400, {"__type": error.get("Code", "ValidationException"), "message": error.get("Message", str(exc))}
        except Exception as exc:  # an operation the stand-in does not serve: AWS would not know it either
            return 400, {"__type": "UnknownOperationException", "message": f"{operation}: {exc}"}
        return 200, _wire(result)


@dataclass
class CliSandbox:
    """The sandbox, its SageMaker face, and a way to run ``kimi-ops`` against them."""

    sandbox: Sandbox
    face: SageMakerFace
    env: dict[str, str]
    cwd: Path
    runs: list[subprocess.CompletedProcess[str]] = field(default_factory=list)

    @property
    def ctx(self) -> Any:
        return self.sandbox.ctx

    def command(self, *args: str) -> list[str]:
        return [str(KIMI_OPS), *args]

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``kimi-ops ARGS`` to completion (output captured, never a shell)."""
        result = subprocess.run(self.command(*args), capture_output=True, text=True, env=self.env, cwd=self.cwd, timeout=timeout)
        self.runs.append(result)
        return result

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """Start ``kimi-ops ARGS`` without waiting (the caller ends it)."""
        return subprocess.Popen(self.command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env, cwd=self.cwd)

    def ok(self, *args: str) -> str:
        """Run and require success; the stdout, or a failure showing what the operator saw and the CLI's log."""
        result = self.run(*args)
        assert result.returncode == 0, self.explain(result)
        return result.stdout

    def explain(self, result: subprocess.CompletedProcess[str]) -> str:
        log = self.sandbox.data_dir / "kimi-ops.log"
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no kimi-ops.log)"
        return f"$ {' '.join(map(str, result.args))}\nexit {result.returncode}\n{result.stdout}\n{result.stderr}\n--- log ---\n{tail}"


def start_cli_sandbox(tmp_path: Path, database_url: str | None = None, **overrides: Any) -> CliSandbox:
    """Start everything; call :func:`stop_cli_sandbox` after."""
    settings: dict[str, Any] = {"roles": CLI_ROLES, "traffic_sweep": QUICK_SWEEP, **overrides}
    if database_url is not None:
        settings["database_url"] = database_url
    sandbox = Sandbox(tmp_path / "sandbox", settings_overrides=settings).start()
    face = SageMakerFace(sandbox.stand_ins["capacity"]).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "AWS_", "SLACK_"))}
    env.update(sandbox.environment(tmp_path / "kubeconfig"))
    env.update({
        "AWS_ENDPOINT_URL_SAGEMAKER": face.url,
        "KIMI_LOG_LEVEL": "INFO",
        "COLUMNS": "240",  # tables in one line each, whatever the terminal running the tests
        "NO_COLOR": "1",
    })
    return CliSandbox(sandbox=sandbox, face=face, env=env, cwd=tmp_path)


def stop_cli_sandbox(cli: CliSandbox) -> None:
    cli.face.stop()
    cli.sandbox.stop()


def approve_in_process(cli: CliSandbox, deployment_id: int, approvers: tuple[str, ...] = (APPROVER_1, APPROVER_2),
                       until: str = "live") -> Any:
    """Decide a deployment's gates in this process (test setup), alternating ``approvers``, until ``until``."""
    from bot.services.access import Identity
    from bot.services.deployments import decide_gate, get_deployment
    from bot.services.engine import Engine

    engine = Engine(cli.ctx, readiness_pause=0.2)
    view = engine.advance(deployment_id)
    turn = 0
    while view.state != until:
        assert view.pending is not None and view.pending.approvable, view
        decide_gate(cli.ctx, deployment_id, view.pending.gate, "approved", Identity(approvers[turn % len(approvers)]),
                    seen_report_hash=view.pending.report_hash, seen_release_hash=view.pending.release_hash)
        turn += 1
        view = engine.advance(deployment_id)
    return get_deployment(cli.ctx, deployment_id)


def deploy_in_process(cli: CliSandbox, release: str, until: str = "live") -> Any:
    """Request a deployment of ``release`` as the deployer and approve it in this process up to ``until``."""
    from bot.services.access import Identity
    from bot.services.deployments import request_deploy

    view = request_deploy(cli.ctx, release, None, Identity(DEPLOYER))
    return approve_in_process(cli, view.id, until=until)
