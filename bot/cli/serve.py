"""``kimi-ops serve``: run the Slack app over HTTP (waitress) or Socket Mode, with the scheduled jobs.

HTTP serves ``/slack/events``, ``/healthz`` and ``/metrics``. ``--socket`` talks
to Slack over an outbound WebSocket (no public URL, as the guide's private
exposure wants) and still serves ``/healthz`` and ``/metrics`` on the port for
the cluster's probes and Prometheus. Socket Mode requests never pass the HTTP
route, so :func:`metered_socket_handler` counts and times them into the same
``/metrics`` series. A missing credential stops start-up with one line naming it.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

import typer

from bot.cli import output
from bot.config import ConfigError, Settings

if TYPE_CHECKING:
    from bot.bootstrap import Root

log = logging.getLogger("kimi_ops.serve")

OUTBOX_SECONDS = 5.0


class HttpServer:
    """A waitress server for a WSGI app on ``host:port`` (port 0 picks a free one), in a thread."""

    def __init__(self, application: Any, host: str = "127.0.0.1", port: int = 0, threads: int = 16) -> None:
        from waitress.server import create_server

        self._server = create_server(application, host=host, port=port, threads=threads, ident="kimi-ops")
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
        return int(self._server.effective_port)  # type: ignore[union-attr]

    @property
    def url(self) -> str:
        return f"http://{self._server.effective_host}:{self.port}"  # type: ignore[union-attr]

    def start(self) -> "HttpServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.close()
        self._server.task_dispatcher.shutdown()  # type: ignore[union-attr]
        self._thread.join(timeout=10)


def socket_request_kind(req: Any) -> str:
    """The ``/metrics`` kind of a Socket Mode envelope, named as :func:`bot.app.request_kind` names HTTP bodies."""
    if req.type == "slash_commands":
        return "command"
    payload = req.payload if isinstance(req.payload, dict) else {}
    return str(payload.get("type") or "other")


def metered_socket_handler(kimi: Any, app_token: str) -> Any:
    """Bolt's Socket Mode handler for ``kimi``, counting and timing each envelope's ack like an HTTP request.

    In the cluster the bot runs in Socket Mode only: without this, ``/metrics``
    would show no Slack traffic at all. (Imported here, not at module level, so
    every other ``kimi-ops`` command starts without loading Bolt.)
    """
    from slack_bolt.adapter.socket_mode import SocketModeHandler
    from slack_bolt.adapter.socket_mode.internals import run_bolt_app, send_response

    metrics = kimi.metrics

    class MeteredSocketModeHandler(SocketModeHandler):
        def handle(self, client: Any, req: Any) -> None:
            kind = socket_request_kind(req)
            started = time.perf_counter()
            response = run_bolt_app(self.app, req)
            # Timed as the HTTP route times it (Bolt's dispatch up to the ack), and recorded before the ack leaves.
            metrics.latency.labels(kind).observe(time.perf_counter() - started)
            metrics.requests.labels(kind, str(response.status)).inc()
            send_response(client, req, response, time.time())

    return MeteredSocketModeHandler(kimi.bolt, app_token)


def required_credentials(settings: Settings, socket: bool) -> None:
    """Refuse to start without the credentials the chosen mode needs (one line each)."""
    if not settings.slack_bot_token:
        raise ConfigError("SLACK_BOT_TOKEN is not set; give the bot token (xoxb-…) of the Slack app")
    if socket and not settings.slack_app_token:
        raise ConfigError("SLACK_APP_TOKEN is not set; Socket Mode needs an app-level token (xapp-…) with connections:write")
    if not socket and not settings.slack_signing_secret:
        raise ConfigError("SLACK_SIGNING_SECRET is not set; HTTP mode verifies every request with the app's signing secret")


def serve(
    host: str = typer.Option("0.0.0.0", "--host", help="Address to listen on."),
    port: int = typer.Option(3000, "--port", help="Port of /slack/events (HTTP mode), /healthz and /metrics."),
    socket: bool = typer.Option(False, "--socket", help="Socket Mode: connect out to Slack with SLACK_APP_TOKEN."),
    jobs: bool = typer.Option(True, "--jobs/--no-jobs", help="Also run the scheduled jobs (with leader election)."),
) -> None:
    """Run the Slack bot until interrupted."""
    from bot.bootstrap import build_root
    from bot.cli.common import context
    from bot.cli.main import run_guarded

    def body() -> None:
        from bot.config import load_settings

        required_credentials(load_settings(), socket)
        ctx = context()
        settings = ctx.settings
        _run(build_root(ctx, slack_token=settings.slack_bot_token), settings, host, port, socket, jobs)

    run_guarded(body)


def _run(root: Root, settings: Settings, host: str, port: int, socket: bool, jobs: bool) -> None:
    from bot.app import create_app

    # The outbox is also written by rollout watches and the scheduled jobs: deliver it periodically.
    kimi = create_app(root, signing_secret=settings.slack_signing_secret or "socket-mode-does-not-sign", outbox_seconds=OUTBOX_SECONDS)
    http = HttpServer(kimi.wsgi(), host, port).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    runner = None
    if jobs:
        from bot.scheduler import JobRunner

        runner = JobRunner(root)
        runner.start()
    handler = None
    if socket:
        handler = metered_socket_handler(kimi, settings.slack_app_token or "")
        handler.connect()
    kimi.start_background()
    output.info(f"kimi-ops is serving on {http.url} ({'Socket Mode' if socket else 'HTTP /slack/events'}); Ctrl-C stops it")
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        if handler is not None:
            handler.close()
        if runner is not None:
            runner.stop()
        kimi.close()
        http.stop()


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
