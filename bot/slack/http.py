"""The HTTP face of the Slack app: Bolt's own WSGI adapter on Slack's path, ``/healthz`` and ``/metrics``, on waitress.

In Socket Mode nothing arrives on the Slack path, but the cluster's probes and
Prometheus still read the other two.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def wsgi_app(bolt: App, metrics: CollectorRegistry, path: str = "/slack/events") -> WsgiApp:
    """``POST path`` to Bolt (which verifies, dispatches and answers 404 elsewhere), ``/healthz``, ``/metrics``."""
    slack = SlackRequestHandler(bolt, path)
    metrics_app = make_wsgi_app(metrics)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        route = environ.get("PATH_INFO", "")
        if route == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n"]
        answer: Iterable[bytes] = (metrics_app if route == "/metrics" else slack)(environ, start_response)
        return answer

    return application


class HttpServer:
    """A waitress server for a WSGI app on ``host:port`` (port 0 picks a free one), in a thread."""

    def __init__(self, application: Any, host: str = "127.0.0.1", port: int = 0, threads: int = 16) -> None:
        from waitress.server import create_server  # type: ignore[import-untyped,unused-ignore]

        self._server: Any = create_server(application, host=host, port=port, threads=threads, ident="kimi-ops")
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="kimi-http", daemon=True)

    def _serve(self) -> None:
        try:
            self._server.run()
        except (OSError, ValueError):
            # Closing the listening socket from stop() can wake the poll loop on a dead descriptor.
            if not self._stopping.is_set():
                raise

    @property
    def port(self) -> int:
        return int(self._server.effective_port)

    @property
    def url(self) -> str:
        return f"http://{self._server.effective_host}:{self.port}"

    def start(self) -> HttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.close()
        self._server.task_dispatcher.shutdown()
        self._thread.join(timeout=10)
