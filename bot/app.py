"""The Bolt app: ``/kimi``, gate and accept-limits buttons, the reject-reason modal, App Home, plus ``/healthz`` and ``/metrics``.

One sync execution model: Bolt with ``process_before_response=True`` and lazy
listeners. Every acknowledgement function only parses (pure, microseconds) and
acks, so Slack always has its answer well inside 3 seconds, over HTTP as over
Socket Mode; the lazy function, on Bolt's bounded worker pool, resolves the
person's groups, calls the command module (one service call), posts its reply
and delivers the outbox; the slow follow-up (the deployment engine, which may
watch a rollout for an hour) runs on a separate engine pool, so it never holds
a worker that answers people.

At the edge: Bolt verifies signature and timestamp (forged or stale → 401);
an exact replay of a signed request inside the 5-minute window is refused too;
redeliveries (``X-Slack-Retry-Num``) are acknowledged and ignored. Errors
reach the person as one short sentence; an unexpected one as a correlation id
that is also in the log, never a traceback.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
from slack_bolt import App, BoltRequest, BoltResponse
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.adapters.slack.blocks import REJECT_MODAL, home_view, reject_modal, render
from bot.adapters.slack.identity import GroupDirectory, web_client
from bot.adapters.slack.notifier import SlackNotifier
from bot.bootstrap import Context
from bot.services.access import Identity
from bot.services.errors import UserError
from bot.services.readiness import status_version
from bot.views.actions import ACCEPT_LIMITS, APPROVE, RECHECK, REJECT, GateTicket
from bot.views.parts import Reply, reply
from commands import actions, home, registry
from commands.base import Usage

log = logging.getLogger("kimi_ops.slack")

REPLAY_WINDOW_SECONDS = 300
HOME_VIEWERS_MAX = 1000


class ReplayGuard:
    """Remembers signatures seen within Slack's freshness window; a second sighting is a replay."""

    def __init__(self, window: float = REPLAY_WINDOW_SECONDS, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._seen: dict[str, float] = {}
        self._window = window
        self._monotonic = monotonic
        self._lock = threading.Lock()

    def first_sighting(self, signature: str) -> bool:
        now = self._monotonic()
        with self._lock:
            if len(self._seen) > 10_000:
                self._seen = {s: t for s, t in self._seen.items() if now - t < self._window}
            seen_at = self._seen.get(signature)
            if seen_at is not None and now - seen_at < self._window:
                return False
            self._seen[signature] = now
            return True


@dataclass
class Metrics:
    """Request counts and acknowledgement latency, per kind of Slack request."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.requests = Counter("kimi_slack_requests", "Slack requests received", ["kind", "status"], registry=self.registry)
        self.latency = Histogram(
            "kimi_slack_ack_seconds", "Time from receiving a Slack request to its acknowledgement", ["kind"],
            registry=self.registry, buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5),
        )


def request_kind(body: bytes) -> str:
    """``command``, ``block_actions``, ``view_submission``, ``event_callback``… from a raw Slack body."""
    text = body.decode("utf-8", "replace")
    if text.startswith("{"):
        try:
            return str(json.loads(text).get("type", "other"))
        except ValueError:
            return "other"
    form = parse_qs(text)
    if "command" in form:
        return "command"
    if "payload" in form:
        try:
            return str(json.loads(form["payload"][0]).get("type", "other"))
        except ValueError:
            return "other"
    return "other"


class CountingExecutor(ThreadPoolExecutor):
    """Bolt's worker pool, counting work not yet finished so a local console can wait for quiet."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending = 0
        self._quiet = threading.Condition()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        with self._quiet:
            self._pending += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: Any) -> None:
        with self._quiet:
            self._pending -= 1
            self._quiet.notify_all()

    def wait_idle(self, timeout: float = 60.0) -> bool:
        with self._quiet:
            return self._quiet.wait_for(lambda: self._pending == 0, timeout)


class KimiApp:
    """The Slack front end of one process; build it with :func:`create_app`."""

    def __init__(self, ctx: Context, bolt: App, client: WebClient, workers: CountingExecutor, command: str) -> None:
        self.ctx = ctx
        self.bolt = bolt
        self.client = client
        self.workers = workers
        self.slow = CountingExecutor(max_workers=workers._max_workers, thread_name_prefix="kimi-engine")
        self.command = command
        self.metrics = Metrics()
        self.replays = ReplayGuard()
        self.directory = GroupDirectory(client, ctx.settings.roles.members)
        self.notifier = SlackNotifier(client, ctx.uow, ctx.clock, on_delivered=self._refresh_homes)
        ctx.adapters.setdefault("notifier", self.notifier)
        self._home_viewers: dict[str, None] = {}
        self._home_lock = threading.Lock()
        self._home_version: tuple[int, int] | None = None
        self._stop = threading.Event()
        self._delivery: threading.Thread | None = None
        self._register()

    def start_delivery(self, every_seconds: float) -> None:
        """Deliver the outbox periodically too: a rollout watch and the scheduled jobs write it while no request runs."""
        def loop() -> None:
            while not self._stop.wait(every_seconds):
                self.deliver()
                self.refresh_homes_if_changed()

        self._delivery = threading.Thread(target=loop, name="kimi-outbox", daemon=True)
        self._delivery.start()

    # ------------------------------------------------------------------ people and replies
    def identity(self, user_id: str) -> Identity:
        return Identity(user_id, self.directory.groups_of(user_id))

    def _guard(self, work: Callable[[], Reply | None], tell: Callable[[Reply], None]) -> Reply | None:
        """Run ``work``; a refusal becomes its sentence, a crash a correlation id (logged with the traceback)."""
        try:
            return work()
        except UserError as exc:
            tell(reply(str(exc)))
        except Exception:
            correlation = uuid.uuid4().hex[:12]
            log.exception("request failed", extra={"correlation_id": correlation})
            tell(reply(f"kimi-ops hit an unexpected error; ask an operator to look up correlation id `{correlation}` in its log."))
        return None

    def _follow(self, answer: Reply | None, tell: Callable[[Reply], None], channel: str | None) -> None:
        """Post ``answer``, hand its slow follow-up to the engine pool, and send what changed to the threads."""
        if answer is None:
            self.deliver()
            return
        if answer.deployment_id is not None:
            self.notifier.remember_origin(answer.deployment_id, channel)
        tell(answer)
        self.deliver()
        follow_up = answer.then
        if follow_up is not None:
            # A rollout watch may take an hour: it must not hold a worker that answers people.
            self.slow.submit(lambda: self._follow(self._guard(follow_up, tell), tell, channel))

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until no request work and no follow-up runs (the local shell prints after this)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = deadline - time.monotonic()
            if self.workers.wait_idle(left) and self.slow.wait_idle(max(0.0, deadline - time.monotonic())) \
                    and self.workers.wait_idle(0):
                return True
        return False

    def deliver(self) -> None:
        try:
            self.notifier.deliver_pending()
        except Exception:
            log.exception("outbox delivery failed; it is retried on the next change")

    # ------------------------------------------------------------------ listeners
    def _register(self) -> None:
        app = self.bolt

        @app.middleware
        def ignore_redeliveries(req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]) -> BoltResponse:
            if req.headers.get("x-slack-retry-num"):
                # Slack re-sends what it thinks we missed; we acknowledged it the first time and act once.
                return BoltResponse(status=200, body="")
            signature = (req.headers.get("x-slack-signature") or [""])[0]
            if signature and not self.replays.first_sighting(signature):
                log.warning("refused a replayed Slack request")
                return BoltResponse(status=401, body="")
            return next()

        def ack_command(ack: Callable[..., None], command: dict[str, Any]) -> None:
            try:
                registry.split(command.get("text", ""))
            except Usage as usage:
                ack(text=f"Usage: {usage}")
                return
            ack()

        def run_command(command: dict[str, Any], respond: Callable[..., Any]) -> None:
            try:
                registry.split(command.get("text", ""))
            except Usage:
                return  # already answered with the usage line
            user, channel = command["user_id"], command.get("channel_id")
            tell = self._responder(respond)
            answer = self._guard(lambda: registry.dispatch(self.ctx, self.identity(user), command.get("text", "")), tell)
            self._follow(answer, tell, channel)

        app.command(self.command)(ack=ack_command, lazy=[run_command])

        def ack_now(ack: Callable[..., None]) -> None:
            ack()

        def approve(body: dict[str, Any], respond: Callable[..., Any]) -> None:
            user, channel, value = _click(body)
            tell = self._clicker(user, channel, respond)
            answer = self._guard(lambda: actions.decide(self.ctx, self.identity(user), value, "approved"), tell)
            self._follow(answer, tell, channel)

        def ask_reason(body: dict[str, Any], respond: Callable[..., Any]) -> None:
            user, channel, value = _click(body)
            tell = self._clicker(user, channel, respond)
            seen: GateTicket | None = self._guard(lambda: actions.may_decide(self.ctx, self.identity(user), value), tell)  # type: ignore[arg-type,assignment]
            if seen is None:
                return
            message_ts = (body.get("container") or {}).get("message_ts")
            try:
                self.client.views_open(trigger_id=body["trigger_id"],
                                       view=reject_modal(value or "", seen.gate, seen.deployment_id, channel, message_ts))
            except SlackApiError as exc:
                # A trigger lives 3 seconds; a slow queue can outlive it. Nothing was decided: say so.
                log.warning("views.open failed for a Reject click: %s", exc.response.get("error"))
                tell(reply(f"Slack could not open the reason form ({exc.response.get('error')}); nothing was rejected. "
                           "Click Reject again."))

        def recheck(body: dict[str, Any], respond: Callable[..., Any]) -> None:
            user, channel, value = _click(body)
            tell = self._clicker(user, channel, respond)
            answer = self._guard(lambda: actions.recheck(self.ctx, self.identity(user), value), tell)
            self._follow(answer, tell, channel)

        def accept_limits(body: dict[str, Any], respond: Callable[..., Any]) -> None:
            user, channel, value = _click(body)
            tell = self._clicker(user, channel, respond)
            answer = self._guard(lambda: actions.accept_limits(self.ctx, self.identity(user), value), tell)
            self._follow(answer, tell, channel)

        app.action(APPROVE)(ack=ack_now, lazy=[approve])
        app.action(RECHECK)(ack=ack_now, lazy=[recheck])
        app.action(ACCEPT_LIMITS)(ack=ack_now, lazy=[accept_limits])
        app.action(REJECT)(ack=ack_now, lazy=[ask_reason])

        def ack_reason(ack: Callable[..., None], view: dict[str, Any]) -> None:
            if not _reason(view):
                ack(response_action="errors", errors={"reason": "Say why the gate is rejected."})
                return
            ack()

        def reject(body: dict[str, Any], view: dict[str, Any]) -> None:
            reason = _reason(view)
            if not reason:
                return
            meta = json.loads(view.get("private_metadata") or "{}")
            user, channel = body["user"]["id"], meta.get("channel")
            tell = self._clicker(user, channel, None)
            answer = self._guard(lambda: actions.decide(self.ctx, self.identity(user), meta.get("ticket"), "rejected", reason), tell)
            self._follow(answer, tell, channel)

        app.view(REJECT_MODAL)(ack=ack_reason, lazy=[reject])

        def home_opened(event: dict[str, Any]) -> None:
            if event.get("tab", "home") != "home":
                return
            user = event["user"]
            with self._home_lock:
                self._home_viewers[user] = None
                while len(self._home_viewers) > HOME_VIEWERS_MAX:
                    self._home_viewers.pop(next(iter(self._home_viewers)))
            self.publish_home(user)

        app.event("app_home_opened")(ack=ack_now, lazy=[home_opened])

        @app.error
        def on_error(error: Exception) -> None:
            correlation = uuid.uuid4().hex[:12]
            log.error("listener error", exc_info=error, extra={"correlation_id": correlation})

    def _responder(self, respond: Callable[..., Any]) -> Callable[[Reply], None]:
        def tell(answer: Reply) -> None:
            rendered = render(answer.parts)
            kind = "ephemeral" if answer.ephemeral else "in_channel"
            respond(text=rendered.text, blocks=rendered.blocks, response_type=kind, replace_original=False)
            for piece in rendered.overflow:
                respond(text=piece, response_type=kind, replace_original=False)

        return tell

    def _clicker(self, user: str, channel: str | None, respond: Callable[..., Any] | None) -> Callable[[Reply], None]:
        """Answers only the person who clicked or submitted."""

        def tell(answer: Reply) -> None:
            rendered = render(answer.parts)
            if channel:
                try:
                    self.client.chat_postEphemeral(channel=channel, user=user, text=rendered.text, blocks=rendered.blocks)
                    return
                except SlackApiError as exc:
                    # e.g. a button in a DM or a channel the bot is not in: the response_url still reaches the clicker.
                    if respond is None:
                        raise
                    log.info("ephemeral post to %s failed (%s); answering through response_url", channel, exc.response.get("error"))
            if respond is not None:
                respond(text=rendered.text, blocks=rendered.blocks, response_type="ephemeral", replace_original=False)
            else:
                log.warning("no channel to answer %s: %s", user, rendered.text)

        return tell

    # ------------------------------------------------------------------ App Home
    def publish_home(self, user: str) -> None:
        try:
            parts = home.parts(self.ctx, self.identity(user))
            self.client.views_publish(user_id=user, view=home_view(parts))
        except Exception:
            log.exception("could not publish the App Home of %s", user)

    def refresh_homes_if_changed(self) -> None:
        """Re-render the Homes this replica's users opened when anything changed, on any replica.

        Another replica may have delivered the change (Slack sends each event to one
        Socket Mode connection), and a passing readiness probe emits no event at all.
        """
        with self._home_lock:
            if not self._home_viewers:
                return
        try:
            version = status_version(self.ctx)
        except Exception:
            log.exception("could not read the status version; Homes are refreshed on the next change")
            return
        if version != self._home_version:
            self._home_version = version
            self._refresh_homes(set())

    def _refresh_homes(self, endpoints: set[str]) -> None:
        with self._home_lock:
            viewers = list(self._home_viewers)
        for user in viewers:
            self.publish_home(user)

    # ------------------------------------------------------------------ HTTP
    def dispatch(self, body: bytes, headers: dict[str, Any], query: str = "") -> BoltResponse:
        """One Slack request through Bolt (used by the HTTP server and the local shell), counted and timed."""
        kind = request_kind(body)
        started = time.perf_counter()
        response = self.bolt.dispatch(BoltRequest(body=body.decode("utf-8"), query=query, headers=headers))
        self.metrics.latency.labels(kind).observe(time.perf_counter() - started)
        self.metrics.requests.labels(kind, str(response.status)).inc()
        return response

    def wsgi(self, path: str = "/slack/events") -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
        metrics_app = make_wsgi_app(self.metrics.registry)

        def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            route, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
            if route == "/healthz":
                start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
                return [b"ok\n"]
            if route == "/metrics":
                return metrics_app(environ, start_response)
            if route == path and method == "POST":
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = environ["wsgi.input"].read(length) if length else b""
                headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
                if environ.get("CONTENT_TYPE"):
                    headers["content-type"] = environ["CONTENT_TYPE"]
                response = self.dispatch(body, headers, environ.get("QUERY_STRING", ""))
                out_headers = [(k, v) for k, values in response.headers.items() for v in values]
                start_response(f"{response.status} {'OK' if response.status < 400 else 'Error'}", out_headers)
                return [response.body.encode("utf-8") if isinstance(response.body, str) else response.body]
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found\n"]

        return application

    def start_background(self) -> None:
        """After a restart: resume in-flight deployments and send what the outbox still holds."""
        from commands.base import engine

        def resume() -> None:
            try:
                engine(self.ctx).resume_all()
            finally:
                self.deliver()

        self.slow.submit(resume)

    def close(self) -> None:
        from commands.base import ENGINE_KEY

        self._stop.set()
        found = self.ctx.adapters.get(ENGINE_KEY)
        if found is not None:
            found.stop_all()
        self.workers.shutdown(wait=True, cancel_futures=True)
        self.slow.shutdown(wait=True, cancel_futures=True)
        if self._delivery is not None:
            self._delivery.join(timeout=10)


def _click(body: dict[str, Any]) -> tuple[str, str | None, str | None]:
    action = (body.get("actions") or [{}])[0]
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")
    return body["user"]["id"], channel, action.get("value")


def _reason(view: dict[str, Any]) -> str:
    values = ((view.get("state") or {}).get("values") or {}).get("reason") or {}
    return str((values.get("reason") or {}).get("value") or "").strip()


def create_app(
    ctx: Context,
    *,
    bot_token: str,
    signing_secret: str,
    command: str = "/kimi",
    workers: int = 16,
    outbox_seconds: float | None = 2.0,
) -> KimiApp:
    """Build the Slack app on ``ctx``; ``auth.test`` is called once to learn the bot's identity."""
    client = web_client(bot_token, ctx.settings.slack_api_url)
    pool = CountingExecutor(max_workers=workers, thread_name_prefix="kimi-slack")
    bolt = App(
        client=client,
        signing_secret=signing_secret,
        process_before_response=True,
        listener_executor=pool,
        raise_error_for_unhandled_request=False,
        logger=logging.getLogger("kimi_ops.bolt"),
    )
    kimi = KimiApp(ctx, bolt, client, pool, command)
    if outbox_seconds:
        kimi.start_delivery(outbox_seconds)
    return kimi
