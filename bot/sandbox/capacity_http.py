"""The capacity stand-in on HTTP: SageMaker's training-plan calls for a separate ``kimi-ops`` process.

moto has no training-plan API, and :class:`~bot.sandbox.capacity.CapacityStandIn`
answers only boto3 clients built in its own process. :class:`SageMakerFace` is a
small server speaking SageMaker's JSON protocol (``X-Amz-Target:
SageMaker.ListTrainingPlans`` …) that answers each call through the stand-in's
own boto3 client (so every answer is validated against AWS's model) and writes it
as AWS does. ``AWS_ENDPOINT_URL_SAGEMAKER`` aims an unchanged
``AwsReservationSource`` at it; :meth:`bot.sandbox.stack.Sandbox.environment`
sets that. The sandbox's endpoint is HyperPod, so EC2 Capacity Blocks (EC2's
query protocol) are not served here.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from botocore import xform_name
from botocore.exceptions import ClientError

from bot.sandbox.capacity import CapacityStandIn

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
            def do_POST(self) -> None:
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

            def log_message(self, *args: Any) -> None:  # quiet: the sandbox's output is the conversation
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            # A short poll: stop() waits for it, and tests start and stop stand-ins hundreds of times.
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="sagemaker-face", daemon=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> SageMakerFace:
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
