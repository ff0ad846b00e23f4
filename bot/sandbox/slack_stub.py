"""A local stand-in for Slack: a Web API stub server, and signed requests like Slack sends them.

:class:`SlackStub` is a real HTTP server on 127.0.0.1 (ephemeral port) that
slack_sdk's ``WebClient`` talks to through ``base_url``: it answers
``auth.test``, records ``chat.postMessage``, ``chat.update``,
``chat.postEphemeral``, ``views.open``, ``views.publish``,
``usergroups.users.list`` and posts to ``response_url`` (``/response/<id>``),
and keeps the resulting channel history so a test or the local shell can read
what a person would see. File uploads take Slack's three steps
(``files_upload_v2``): ``files.getUploadURLExternal`` hands out an upload URL
served by the stub itself (``/upload/<file id>``), which records the bytes, and
``files.completeUploadExternal`` shares the file into a channel or thread as a
message carrying ``files``. :meth:`SlackStub.fail_next` makes a method (or the
upload URL) fail, to exercise retries; :meth:`SlackStub.rate_limit_next` answers
HTTP 429 with ``Retry-After`` as Slack does when a method's rate tier is spent,
and :meth:`SlackStub.drop_next` closes the connection without an answer.
:meth:`SlackStub.lose_answer_next` takes a call (a post is in the channel) and
then closes the connection without its answer, and :meth:`SlackStub.hold_next`
takes one and answers only when the test releases it: what a sender sees when
Slack's answer is lost or slow. :meth:`SlackStub.slow_next` takes a call only
once released: a post still on its way, not in the channel yet. A message keeps
the ``metadata`` it was posted with; ``conversations.history`` and
``conversations.replies`` read a channel or a thread back (``include_all_metadata`` adds it), paged with ``limit`` and
``cursor``. Each recorded call keeps the size of the body as sent.
``auth.test`` names the workspace (``team_id``), the app (``app_id``) and, on an
Enterprise Grid, the organisation (``enterprise_id``), as Slack does for a bot token.

:class:`SlackSender` builds the bodies Slack sends (slash command form,
``block_actions`` / ``view_submission`` payloads, Events API JSON) in the shapes
of Slack's own samples, and signs them with the ``v0`` HMAC-SHA256 scheme.
Tests and ``kimi-ops shell`` reuse both.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

JSON_FIELDS = ("blocks", "view", "attachments", "metadata", "files")


def sign(secret: str, timestamp: str, body: str) -> str:
    """Slack's request signature: ``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}``."""
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return f"v0={digest}"


@dataclass
class Call:
    """One Web API call (or response_url post) the bot made."""

    method: str
    params: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    size: int = 0  # bytes of the request body as sent (what Slack measures its limits on)


@dataclass
class Message:
    """A message as a channel member would currently see it (after updates)."""

    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None = None
    ephemeral_to: str | None = None
    updated: int = 0
    # Files shared with this message: id, name, title, size, mimetype (what Slack's file objects carry).
    files: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] | None = None  # chat.postMessage's ``metadata`` (event_type, event_payload)

    def as_slack(self, with_metadata: bool) -> dict[str, Any]:
        """The message as ``conversations.history`` / ``conversations.replies`` list it."""
        out: dict[str, Any] = {"type": "message", "ts": self.ts, "text": self.text, "blocks": self.blocks}
        if self.thread_ts:
            out["thread_ts"] = self.thread_ts
        if self.files:
            out["files"] = [dict(f) for f in self.files]
        if with_metadata and self.metadata:
            out["metadata"] = dict(self.metadata)
        return out


@dataclass
class Hold:
    """A call the stub took and answers only once :meth:`release` is called (``reached`` is set when it came)."""

    method: str
    matching: Callable[[dict[str, Any]], bool]
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    lose: bool = False  # close the connection instead of answering
    slow: bool = False  # Slack takes the call only once released (it is on its way, not in the channel yet)

    def release(self) -> None:
        self.released.set()


@dataclass
class Upload:
    """A file the bot uploaded: what it declared, and the bytes the upload URL received."""

    id: str
    filename: str
    length: int
    alt_txt: str | None = None
    data: bytes | None = None
    shared: bool = False

    @property
    def mimetype(self) -> str:
        return "image/png" if (self.data or b"").startswith(b"\x89PNG") else "application/octet-stream"


class SlackStub:
    """The Slack Web API stand-in; ``with SlackStub() as slack: …`` or ``start()``/``stop()``."""

    def __init__(
        self, *, groups: dict[str, list[str]] | None = None, bot_user: str = "UKIMIBOT", missing_channels: set[str] | None = None,
        team_id: str = "T0SANDBOX", app_id: str = "A0KIMIOPS", enterprise_id: str | None = None,
    ) -> None:
        self.groups = dict(groups or {})
        # Posting to these answers channel_not_found, like Slack for a channel the bot is not in.
        self.missing_channels = set(missing_channels or ())
        # What apps.connections.open hands out: the WebSocket URL of a Socket Mode stand-in, when one runs.
        self.socket_url: str | None = None
        self.bot_user = bot_user
        self.team_id, self.app_id, self.enterprise_id = team_id, app_id, enterprise_id
        self.calls: list[Call] = []
        self.messages: list[Message] = []
        self.views: dict[str, dict[str, Any]] = {}
        self.uploads: dict[str, Upload] = {}
        # method (or "upload" for the upload URL) → errors still to answer, oldest first.
        self._failures: dict[str, list[str]] = {}
        # method → Retry-After seconds of the 429 answers still to give, oldest first.
        self._rate_limits: dict[str, list[int]] = {}
        self._drops: dict[str, int] = {}  # method → calls still to leave unanswered (connection closed)
        self._holds: list[Hold] = []  # calls to take, then answer late or not at all, oldest first
        self._ts = itertools.count(1)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> SlackStub:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read calls, not logs
                return

            def _answer(self, status: int, payload: dict[str, Any] | str, headers: dict[str, str] | None = None) -> None:
                data = payload if isinstance(payload, str) else json.dumps(payload)
                raw = data.encode()
                self.send_response(status)
                self.send_header(
                    "Content-Type", "application/json; charset=utf-8" if not isinstance(payload, str) else "text/plain"
                )
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                self._answer(200, stub.handle(parts.path, _flat(parse_qs(parts.query))))

            def do_POST(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                if parts.path.startswith("/upload/"):
                    status, text = stub.receive_upload(parts.path.rsplit("/", 1)[-1], self.rfile.read(length) if length else b"")
                    self._answer(status, text)
                    return
                raw = self.rfile.read(length).decode() if length else ""
                if (self.headers.get("Content-Type") or "").startswith("application/json"):
                    params = json.loads(raw or "{}")
                else:
                    params = _flat(parse_qs(raw))
                params.update(_flat(parse_qs(parts.query)))
                if stub.dropped(parts.path):
                    self.close_connection = True  # no answer at all: the client sees the connection reset
                    return
                retry_after = stub.rate_limited(parts.path, params)
                if retry_after is not None:
                    self._answer(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(retry_after)})
                    return
                hold = stub.held(parts.path, params)
                if hold is not None and hold.slow:
                    hold.reached.set()
                    hold.released.wait(timeout=120)
                answer = stub.handle(parts.path, params, size=length)
                if hold is not None and not hold.slow:
                    hold.reached.set()
                    if hold.lose:
                        self.close_connection = True  # taken, but the caller never hears so
                        return
                    hold.released.wait(timeout=120)
                self._answer(200, answer)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            # A short poll: stop() waits for it, and tests start and stop stand-ins hundreds of times.
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="slack-stub",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> SlackStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the stub first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def api_url(self) -> str:
        """What to give ``WebClient(base_url=…)`` / ``KIMI_SLACK_API_URL``."""
        return self.url + "/api/"

    def fail_next(self, method: str, error: str = "internal_error", times: int = 1) -> None:
        """The next ``times`` calls of ``method`` answer ``error`` (``"upload"``: the upload URL answers HTTP 500)."""
        with self._lock:
            self._failures.setdefault(method, []).extend([error] * times)

    def rate_limit_next(self, method: str, retry_after: int = 1, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` answer HTTP 429 ``ratelimited`` with ``Retry-After: retry_after``."""
        with self._lock:
            self._rate_limits.setdefault(method, []).extend([retry_after] * times)

    def drop_next(self, method: str, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` get no answer: the connection is closed (recorded as ``dropped:METHOD``)."""
        with self._lock:
            self._drops[method] = self._drops.get(method, 0) + times

    def hold_next(self, method: str, matching: Callable[[dict[str, Any]], bool] | None = None) -> Hold:
        """Take the next call of ``method`` (whose params ``matching`` accepts) but answer only after ``release()``."""
        return self._hold(Hold(method, matching or (lambda _params: True)))

    def slow_next(self, method: str, matching: Callable[[dict[str, Any]], bool] | None = None) -> Hold:
        """Take the next call of ``method`` (whose params ``matching`` accepts) only after ``release()``: a slow Slack."""
        return self._hold(Hold(method, matching or (lambda _params: True), slow=True))

    def lose_answer_next(self, method: str, matching: Callable[[dict[str, Any]], bool] | None = None) -> Hold:
        """Take the next call of ``method`` (whose params ``matching`` accepts), then close without answering."""
        return self._hold(Hold(method, matching or (lambda _params: True), lose=True))

    def _hold(self, hold: Hold) -> Hold:
        with self._lock:
            self._holds.append(hold)
        return hold

    def held(self, path: str, params: dict[str, Any]) -> Hold | None:
        """The hold this call meets, if any (each hold catches one call)."""
        method = path.removeprefix("/api/")
        with self._lock:
            for hold in self._holds:
                if hold.method == method and hold.matching(params):
                    self._holds.remove(hold)
                    return hold
        return None

    def dropped(self, path: str) -> bool:
        method = path.removeprefix("/api/")
        with self._changed:
            if not self._drops.get(method):
                return False
            self._drops[method] -= 1
            self.calls.append(Call(f"dropped:{method}", {}))
            self._changed.notify_all()
            return True

    def rate_limited(self, path: str, params: dict[str, Any]) -> int | None:
        """The Retry-After of a 429 owed to this call (recorded as ``ratelimited:METHOD``), or None to answer it."""
        method = path.removeprefix("/api/")
        with self._changed:
            queued = self._rate_limits.get(method)
            if not queued:
                return None
            self.calls.append(Call(f"ratelimited:{method}", params))
            self._changed.notify_all()
            return queued.pop(0)

    def _failure(self, method: str) -> str | None:
        queued = self._failures.get(method)
        return queued.pop(0) if queued else None

    def receive_upload(self, file_id: str, data: bytes) -> tuple[int, str]:
        """A POST to an upload URL: raw bytes, as slack_sdk sends them."""
        with self._changed:
            self.calls.append(Call("upload", {"file_id": file_id, "bytes": len(data)}))
            if self._failure("upload"):
                return 500, "upload failed"
            upload = self.uploads.get(file_id)
            if upload is None:
                return 404, "no such upload"
            upload.data = data
            self._changed.notify_all()
            return 200, f"OK - {len(data)}"

    def files_in(self, channel: str, thread_ts: str | None = None) -> list[tuple[Message, Upload]]:
        """Files shared in ``channel`` (in the thread of ``thread_ts`` when given) with the bytes received."""
        with self._lock:
            return [
                (m, self.uploads[f["id"]])
                for m in self.messages
                for f in m.files
                if m.channel == channel and (thread_ts is None or m.thread_ts == thread_ts)
            ]

    def response_url(self, name: str = "r") -> str:
        return f"{self.url}/response/{name}-{next(self._ts)}"

    # ------------------------------------------------------------------ the API
    def handle(self, path: str, params: dict[str, Any], size: int = 0) -> dict[str, Any] | str:
        for key in JSON_FIELDS:
            if isinstance(params.get(key), str) and params[key][:1] in "[{":
                params[key] = json.loads(params[key])
        with self._changed:
            if path.startswith("/response/"):
                self.calls.append(Call("response_url", {**params, "url": path}, size=size))
                channel = "response:" + path.rsplit("/", 1)[-1]
                self.messages.append(
                    Message(
                        channel,
                        self._next_ts(),
                        params.get("text", ""),
                        params.get("blocks") or [],
                        ephemeral_to="requester" if params.get("response_type", "ephemeral") == "ephemeral" else None,
                    )
                )
                self._changed.notify_all()
                return "ok"
            method = path.removeprefix("/api/")
            self.calls.append(Call(method, params, size=size))
            answer = self._method(method, params)
            self._changed.notify_all()
            return answer

    def _next_ts(self) -> str:
        return f"1700000000.{next(self._ts):06d}"

    def _method(self, method: str, p: dict[str, Any]) -> dict[str, Any]:
        failure = self._failure(method)
        if failure:
            return {"ok": False, "error": failure}
        if method == "auth.test":
            identity = {
                "ok": True,
                "url": "https://sandbox.slack.com/",
                "team": "Sandbox",
                "user": "kimi-ops",
                "team_id": self.team_id,
                "user_id": self.bot_user,
                "bot_id": "B0KIMIOPS",
                "app_id": self.app_id,
                "app_name": "kimi-ops",
                "is_enterprise_install": False,
            }
            if self.enterprise_id:
                identity["enterprise_id"] = self.enterprise_id
            return identity
        if method in ("chat.postMessage", "chat.update", "chat.postEphemeral") and p.get("channel") in self.missing_channels:
            return {"ok": False, "error": "channel_not_found"}
        if method == "chat.postMessage":
            ts = self._next_ts()
            self.messages.append(
                Message(p["channel"], ts, p.get("text", ""), p.get("blocks") or [], thread_ts=p.get("thread_ts"),
                        metadata=p.get("metadata") if isinstance(p.get("metadata"), dict) else None)
            )
            return {"ok": True, "channel": p["channel"], "ts": ts, "message": {"text": p.get("text", ""), "ts": ts}}
        if method == "chat.update":
            for m in self.messages:
                if m.channel == p["channel"] and m.ts == p["ts"]:
                    m.text, m.blocks, m.updated = p.get("text", m.text), p.get("blocks") or [], m.updated + 1
                    return {"ok": True, "channel": m.channel, "ts": m.ts, "text": m.text}
            return {"ok": False, "error": "message_not_found"}
        if method == "chat.postEphemeral":
            ts = self._next_ts()
            self.messages.append(Message(p["channel"], ts, p.get("text", ""), p.get("blocks") or [], ephemeral_to=p["user"]))
            return {"ok": True, "message_ts": ts}
        if method in ("conversations.history", "conversations.replies"):
            return self._read_back(method, p)
        if method in ("views.open", "views.publish"):
            view_id = f"V{next(self._ts):08d}"
            view = {**p["view"], "id": view_id}
            self.views[p.get("user_id") or p.get("trigger_id", "")] = view
            return {"ok": True, "view": view}
        if method == "files.getUploadURLExternal":
            try:
                length = int(p.get("length", ""))
            except ValueError:
                return {"ok": False, "error": "invalid_arguments"}
            if not p.get("filename") or length < 1:
                return {"ok": False, "error": "invalid_arguments"}
            file_id = f"F{next(self._ts):010d}"
            self.uploads[file_id] = Upload(file_id, p["filename"], length, p.get("alt_txt"))
            return {"ok": True, "upload_url": f"{self.url}/upload/{file_id}", "file_id": file_id}
        if method == "files.completeUploadExternal":
            wanted = p.get("files") or []
            uploads = [self.uploads.get(str(f.get("id"))) for f in wanted]
            if not wanted or any(u is None or u.data is None or len(u.data) != u.length or u.shared for u in uploads):
                return {"ok": False, "error": "file_upload_incomplete" if wanted else "invalid_arguments"}
            channel = p.get("channel_id")
            if channel in self.missing_channels:
                return {"ok": False, "error": "channel_not_found"}
            files = []
            for f, u in zip(wanted, uploads, strict=False):
                assert u is not None
                u.shared = bool(channel)
                files.append(
                    {
                        "id": u.id,
                        "name": u.filename,
                        "title": f.get("title") or u.filename,
                        "size": len(u.data or b""),
                        "mimetype": u.mimetype,
                        "alt_txt": u.alt_txt,
                    }
                )
            if channel:
                self.messages.append(
                    Message(
                        channel, self._next_ts(), p.get("initial_comment") or "", [], thread_ts=p.get("thread_ts"), files=files
                    )
                )
            return {"ok": True, "files": [{"id": f["id"], "title": f["title"]} for f in files]}
        if method == "apps.connections.open":
            if not self.socket_url:
                return {"ok": False, "error": "not_allowed_token_type"}
            return {"ok": True, "url": self.socket_url}
        if method == "usergroups.users.list":
            group = p.get("usergroup", "")
            if group not in self.groups:
                return {"ok": False, "error": "no_such_subteam"}
            return {"ok": True, "users": list(self.groups[group])}
        return {"ok": False, "error": "unknown_method"}

    def _read_back(self, method: str, p: dict[str, Any]) -> dict[str, Any]:
        """A channel's top-level messages, newest first, or a thread (its root first), oldest first; paged."""
        channel, shown = p.get("channel"), [m for m in self.messages if not m.ephemeral_to]
        if method == "conversations.history":
            found = [m for m in reversed(shown) if m.channel == channel and m.thread_ts is None]
        else:
            found = [m for m in shown if m.channel == channel and (m.ts == p.get("ts") or m.thread_ts == p.get("ts"))]
            if not any(m.ts == p.get("ts") for m in found):
                return {"ok": False, "error": "thread_not_found"}
        start, limit = int(p.get("cursor") or 0), int(p.get("limit") or 100)
        page = found[start:start + limit]
        more = start + limit < len(found)
        with_metadata = str(p.get("include_all_metadata", "")).lower() in ("1", "true")
        return {"ok": True, "messages": [m.as_slack(with_metadata) for m in page], "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    # ------------------------------------------------------------------ reading
    def calls_to(self, method: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> Any:
        """Block until ``predicate(self)`` is truthy (the bot answers after its acknowledgement)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                result = predicate(self)
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        "the bot did not send what was expected; calls so far: " + ", ".join(c.method for c in self.calls)
                    )
                self._changed.wait(left)

    def thread(self, channel: str, root_ts: str) -> list[Message]:
        with self._lock:
            return [m for m in self.messages if m.channel == channel and (m.ts == root_ts or m.thread_ts == root_ts)]

    def seen_by(self, user: str) -> list[Message]:
        """Messages shown only to ``user`` (ephemeral), oldest first."""
        with self._lock:
            return [m for m in self.messages if m.ephemeral_to == user]


def _flat(query: dict[str, list[str]]) -> dict[str, Any]:
    return {k: v[0] if len(v) == 1 else v for k, v in query.items()}


class SlackSender:
    """Builds and signs what Slack sends to the app (shapes from Slack's own samples)."""

    def __init__(
        self, signing_secret: str, stub: SlackStub, *, team: str | None = None, app: str | None = None, command: str = "/kimi",
    ) -> None:
        self.secret = signing_secret
        self.stub = stub
        # By default the requests come from the workspace and app the stub's auth.test names.
        self.team = team or stub.team_id
        self.app = app or stub.app_id
        self.command = command

    def headers(
        self, body: str, *, timestamp: int | None = None, content_type: str = "application/x-www-form-urlencoded"
    ) -> dict[str, str]:
        ts = str(int(time.time()) if timestamp is None else timestamp)
        return {"content-type": content_type, "x-slack-request-timestamp": ts, "x-slack-signature": sign(self.secret, ts, body)}

    def slash(self, user: str, text: str, channel: str = "C0KIMIOPS") -> str:
        return urlencode(
            {
                "token": "unused-verification-token",
                "team_id": self.team,
                "team_domain": "sandbox",
                "api_app_id": self.app,
                "channel_id": channel,
                "channel_name": "kimi-ops",
                "user_id": user,
                "user_name": user.lower(),
                "command": self.command,
                "text": text,
                "response_url": self.stub.response_url("cmd"),
                "trigger_id": f"{time.time_ns()}.trigger",
            }
        )

    def click(self, user: str, message: Message, action_id: str, value: str) -> str:
        payload = {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "team_id": self.team},
            "api_app_id": self.app,
            "token": "unused-verification-token",
            "container": {"type": "message", "message_ts": message.ts, "channel_id": message.channel, "is_ephemeral": False},
            "trigger_id": f"{time.time_ns()}.trigger",
            "team": {"id": self.team, "domain": "sandbox"},
            "channel": {"id": message.channel, "name": "kimi-ops"},
            "message": {"type": "message", "ts": message.ts, "text": message.text, "blocks": message.blocks},
            "response_url": self.stub.response_url("act"),
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": "b",
                    "type": "button",
                    "value": value,
                    "text": {"type": "plain_text", "text": action_id},
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }
        return urlencode({"payload": json.dumps(payload)})

    def submit(self, user: str, view: dict[str, Any], values: dict[str, dict[str, str]]) -> str:
        state = {
            block: {action: {"type": "plain_text_input", "value": value} for action, value in actions.items()}
            for block, actions in values.items()
        }
        payload = {
            "type": "view_submission",
            "team": {"id": self.team, "domain": "sandbox"},
            "user": {"id": user, "username": user.lower(), "team_id": self.team},
            "api_app_id": self.app,
            "token": "unused-verification-token",
            "trigger_id": f"{time.time_ns()}.trigger",
            "view": {**view, "state": {"values": state}, "team_id": self.team, "app_id": self.app},
            "response_urls": [],
        }
        return urlencode({"payload": json.dumps(payload)})

    def home_opened(self, user: str) -> str:
        return json.dumps(
            {
                "token": "unused-verification-token",
                "team_id": self.team,
                "api_app_id": self.app,
                "type": "event_callback",
                "event_id": f"Ev{time.time_ns()}",
                "event_time": int(time.time()),
                "event": {
                    "type": "app_home_opened",
                    "user": user,
                    "channel": "D0HOME",
                    "tab": "home",
                    "event_ts": f"{time.time():.6f}",
                },
            }
        )
