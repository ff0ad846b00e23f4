"""The HTTP face of the Slack app: Bolt's WSGI adapter on Slack's path, ``/healthz``, ``/readyz``, ``/metrics``, on waitress
(and Alertmanager's webhook, :mod:`bot.slack.alert_webhook`).

In Socket Mode nothing arrives on the Slack path, but the cluster's probes and
Prometheus still read the others.

``/healthz`` is liveness: the process answers HTTP (a wedged one is restarted).
``/readyz`` is readiness: 200 only when every check (:class:`ReadinessProbe`:
the database answers at the current schema, and in Socket Mode the connection
to Slack is up) finds nothing wrong, else 503 with the reasons. A replica that
is not ready is taken out of service, never restarted for it: restarting
would not bring the database back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from slack_bolt import App, BoltResponse
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.adapter.wsgi.http_request import WsgiHttpRequest

from bot.logs import logger_for
from bot.slack.middleware.unreadable import bolt_request

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Check = Callable[[], list[str]]

log = logger_for(__name__)

READY_WAIT_SECONDS = 2.0  # under the probe's 3-second timeout


class KimiRequestHandler(SlackRequestHandler):
    """Bolt's WSGI adapter, building its requests with :func:`bolt_request` so an unreadable body is answered, not a 500."""

    def dispatch(self, request: WsgiHttpRequest) -> BoltResponse:
        return self.app.dispatch(bolt_request(_body(request.environ), request.query_string, request.get_headers()))


def _body(environ: dict[str, Any]) -> str:
    """The request body as text; bytes that are not UTF-8 become U+FFFD, so their signature fails (401) instead of a 500."""
    stream = environ.get("wsgi.input")
    if stream is None:
        return ""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    return bytes(stream.read(length)).decode("utf-8", errors="replace")


class ReadinessProbe:
    """Runs the readiness checks off the request thread, waiting at most ``wait_seconds`` for them.

    A database that stops answering can hang a connection attempt for seconds; the
    probe then says so instead of timing out, and never starts a second run while
    one is still stuck (probes would otherwise pile up threads).
    """

    def __init__(self, checks: Sequence[Check], wait_seconds: float = READY_WAIT_SECONDS) -> None:
        self.checks = list(checks)
        self.wait_seconds = wait_seconds
        self._running: Future[list[str]] | None = None
        self._lock = threading.Lock()

    def _run(self, future: Future[list[str]]) -> None:
        problems: list[str] = []
        try:
            for check in self.checks:
                problems += check()
        except Exception as exc:  # a broken check must read as "not ready", not as a crashed probe
            problems.append(f"a readiness check failed ({type(exc).__name__})")
        future.set_result(problems)

    def __call__(self) -> list[str]:
        """The problems found (``[]``: ready)."""
        with self._lock:
            future = self._running
            if future is None or future.done():
                future = self._running = Future()
                threading.Thread(target=self._run, args=(future,), name="kimi-readyz", daemon=True).start()
        try:
            return future.result(timeout=self.wait_seconds)
        except TimeoutError:
            return [f"the readiness checks did not finish within {self.wait_seconds:g} s (the database may not answer)"]


def wsgi_app(bolt: App, metrics: CollectorRegistry, path: str = "/slack/events", ready: Check | None = None,
             routes: Mapping[str, WsgiApp] | None = None) -> WsgiApp:
    """``POST path`` to Bolt (which verifies, dispatches and answers 404 elsewhere), ``/healthz``, ``/readyz``, ``/metrics``;
    ``routes`` adds other paths (Alertmanager's webhook)."""
    slack = KimiRequestHandler(bolt, path)
    metrics_app = make_wsgi_app(metrics)
    others = dict(routes or {})

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        route = environ.get("PATH_INFO", "")
        if route in others:
            return others[route](environ, start_response)
        if route == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n"]
        if route == "/readyz":
            problems = ready() if ready is not None else []
            if problems:
                log.warning("not ready: %s", "; ".join(problems))
                start_response("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")])
                return [("not ready: " + "; ".join(problems) + "\n").encode()]
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ready\n"]
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

        def close() -> None:
            # The loop runs while any connection is open: a client's idle keep-alive connection (Alertmanager's,
            # a load balancer's) kept it running until the join below gave up, 10 s later. Idle ones close as
            # waitress's own idle maintenance closes them; one serving a request finishes it first.
            for channel in list(self._server.active_channels.values()):
                if not channel.requests:
                    channel.will_close = True
            self._server.close()

        # Closed from its own loop thread, the server's poll wakes at once; closed from here, the loop would sleep
        # out its poll timeout (waitress's asyncore_loop_timeout, 1 s) before it noticed.
        try:
            self._server.trigger.pull_trigger(close)
        except OSError:  # the loop has already ended (its trigger is closed)
            self._server.close()
        self._thread.join(timeout=10)
        self._server.task_dispatcher.shutdown()
