"""``kimi-ops serve``: run the Slack app over HTTP (waitress) or Socket Mode, with the scheduled jobs.

HTTP serves ``/slack/events``, ``/healthz``, ``/readyz`` and ``/metrics`` (:mod:`bot.slack.http`).
``--socket`` talks to Slack over an outbound WebSocket (no public URL, as the
guide's private exposure wants) and still serves ``/healthz``, ``/readyz`` (which
then also needs the WebSocket up) and ``/metrics`` on the port for the cluster's
probes and Prometheus; Socket Mode requests never
pass the HTTP route, but the app counts and times every dispatch
(:mod:`bot.slack.middleware.metrics`), so they land in the same ``/metrics``
series. A missing credential stops start-up with one line naming it.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

import typer

from bot.cli import output
from bot.cli.guard import run_guarded
from bot.config_error import ConfigError
from bot.logs import logger_for

if TYPE_CHECKING:
    from bot.bootstrap import Root
    from bot.config import Settings

log = logger_for(__name__)

# Connections this (answering) process may open on PostgreSQL; its worker gets the rest of the replica's budget.
FRONT_CONNECTIONS = 8



def socket_handler(kimi: Any, app_token: str) -> Any:
    """Bolt's Socket Mode handler for ``kimi``: its app counts and times each envelope into ``/metrics`` as over HTTP.

    (Imported here, not at module level, so every other ``kimi-ops`` command starts without loading Bolt.)
    """
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    return SocketModeHandler(kimi.bolt, app_token)


def connect_socket_mode(handler: Any, api_url: str | None) -> None:
    """Open the WebSocket to Slack; a refused app-level token or an unreachable Web API is one named line (exit 2)."""
    from slack_sdk.errors import SlackApiError

    url = f"{(api_url or 'https://slack.com/api/').rstrip('/')}/apps.connections.open"
    try:
        handler.connect()
    except SlackApiError as exc:
        error = exc.response.get("error") if isinstance(exc.response.data, dict) else exc.response.status_code
        raise ConfigError(f"SLACK_APP_TOKEN: Slack's Web API at {url} refused the app-level token ({error}); give an "
                          "app-level token (xapp-…) with connections:write") from None
    except OSError as exc:
        raise ConfigError(f"Slack's Web API at {url} did not answer ({getattr(exc, 'reason', None) or exc}); Socket "
                          "Mode needs it to open its connection: check the network to Slack") from None


def required_credentials(settings: Settings, socket: bool) -> None:
    """Refuse to start without the credentials the chosen mode needs (one line each)."""
    if not settings.slack_bot_token:
        raise ConfigError("SLACK_BOT_TOKEN is not set; give the bot token (xoxb-…) of the Slack app")
    if socket and not settings.slack_app_token:
        raise ConfigError("SLACK_APP_TOKEN is not set; Socket Mode needs an app-level token (xapp-…) with connections:write")
    if not socket and not settings.slack_signing_secret:
        raise ConfigError("SLACK_SIGNING_SECRET is not set; HTTP mode verifies every request with the app's signing secret")


def connection_budget(settings: Settings) -> str:
    """One line saying what this process may open on the database (DESIGN.md, "Connections", has the arithmetic)."""
    from bot.adapters.store.engine import display_url

    url = settings.effective_database_url
    if not url.startswith("postgresql"):
        return f"database {display_url(url)}: SQLite, a single replica"
    return (f"database {display_url(url)}: at most {settings.db_connections_max} connections from this replica "
            f"(KIMI_DB_POOL_SIZE={settings.db_pool_size} + KIMI_DB_MAX_OVERFLOW={settings.db_max_overflow}; "
            "the leader lock, the job store and /readyz draw from them; one more for a moment when KIMI_AUTO_MIGRATE upgrades)")


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on; a container or host that others "
                                                          "reach it on says so (--host 0.0.0.0, as deploy/bot does)."),
    port: int = typer.Option(3000, "--port", help="Port of /slack/events (HTTP mode), /healthz, /readyz and /metrics."),
    socket: bool = typer.Option(False, "--socket", help="Socket Mode: connect out to Slack with SLACK_APP_TOKEN."),
    jobs: bool = typer.Option(True, "--jobs/--no-jobs", help="Also run the scheduled jobs (with leader election)."),
) -> None:
    """Run the Slack bot until interrupted."""
    from bot.bootstrap import build_root

    def body() -> None:
        from bot.bootstrap import build_context
        from bot.config import load_settings

        settings = load_settings()
        required_credentials(settings, socket)
        worker_overflow = max(0, settings.db_max_overflow - FRONT_CONNECTIONS)
        # The replica's connection budget is shared: this process takes FRONT_CONNECTIONS of the overflow.
        front = settings.model_copy(update={"db_pool_size": min(settings.db_pool_size, FRONT_CONNECTIONS // 2),
                                            "db_max_overflow": FRONT_CONNECTIONS - min(settings.db_pool_size,
                                                                                        FRONT_CONNECTIONS // 2)})
        ctx = build_context(front, connect=True)
        _run(build_root(ctx, slack_token=settings.slack_bot_token), settings, host, port, socket, jobs, worker_overflow)

    run_guarded(body)


def _run(root: Root, settings: Settings, host: str, port: int, socket: bool, jobs: bool, worker_overflow: int) -> None:
    from bot.cli.worker import WorkerSupervisor
    from bot.slack.app import create_app, freeze_start_up
    from bot.slack.http import HttpServer

    # This process only answers Slack; the follow-up of each request, the outbox, resuming and taking over
    # deployments and the scheduled jobs run in the worker process beside it (bot/slack/work.py).
    supervisor = WorkerSupervisor(["--jobs" if jobs else "--no-jobs"], {"KIMI_DB_MAX_OVERFLOW": str(worker_overflow)})
    kimi = create_app(root, signing_secret=settings.slack_signing_secret or "socket-mode-does-not-sign",
                      role="front", wake_fd=supervisor.wake_write)
    freeze_start_up()
    handler: Any = None

    def slack_connected() -> list[str]:
        # Slack sends a Socket Mode replica nothing while its WebSocket is down: not ready, though alive.
        if socket and (handler is None or not handler.client.is_connected()):
            return ["the Socket Mode connection to Slack is not up"]
        return []

    # Ready (and, in Socket Mode, connected to Slack) only once the worker takes work: the first answer after
    # a start is then as quick as any other, not held behind the worker's start-up.
    http = HttpServer(kimi.wsgi(checks=(supervisor.problems, slack_connected)), host, port).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    supervisor.start()
    output.info(f"kimi-ops is serving on {http.url} ({'Socket Mode' if socket else 'HTTP /slack/events'}); Ctrl-C stops it")
    budget = connection_budget(settings)
    output.info(budget)
    log.info(budget)
    try:
        if socket:
            while not (supervisor.ready.wait(0.5) or stop.is_set()):
                pass
            handler = socket_handler(kimi, settings.slack_app_token or "")
            connect_socket_mode(handler, settings.slack_api_url)
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        # Intake first (what is being answered finishes, and spools its work), then the worker, then the app
        # and its spool: a request still answering after the spool closed could not spool its work.
        if handler is not None:
            handler.close()
        http.stop()
        supervisor.stop()
        _drain_what_is_left(kimi)
        kimi.close()


def _drain_what_is_left(kimi: Any, seconds: float = 5.0) -> None:
    """The spool still holding acknowledged jobs after the worker stopped (it could not start while the database
    was away, say): one last try to move them into the shared database before the pod goes."""
    from bot.slack.work import Worker

    try:
        left = kimi.spool.waiting() if kimi.spool is not None else 0
    except Exception:
        return
    if left:
        Worker(kimi.ctx, lambda _kind, _job: None, spool=kimi.spool).drain(seconds)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
