"""Posts a Slack message (or uploads a file) exactly once, across replicas and retries.

Every message the notifier posts has a key (``deployment:<id>`` for a thread's
root, ``gate:<id>`` for a gate message, ``event:<id>`` for an event's reply or
upload, ``…/<n>`` for overflow pieces), claimed in ``slack_posts`` and committed
before the Web API call, with the message's ``ts`` committed right after it,
each in a transaction of its own. A retry finds the ``ts`` and posts nothing; a
claim without one (the replica died mid-call, or Slack's answer was lost) is
looked up in Slack by the key the message carries in its metadata (an upload:
by its title) before it is sent again. Another process's young claim may be a
post still on its way, not in the channel yet, so it is left alone
(:class:`PostInFlight`) until no Web API call could last that long: two
replicas showing one deployment's progress post its message once. So nothing
that fails around a post (the database, a guard, a stop) makes it post twice,
and posts go out without slack_sdk's connection-error retries, which would
resend a message Slack may already have taken. Edits (``chat.update``) are
idempotent and need none of this.
"""

from __future__ import annotations

import copy
import datetime as dt
import threading
import uuid
from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from bot.adapters.clock import Clock
from bot.adapters.slack.identity import RATE_LIMIT_RETRIES
from bot.adapters.store.posts import PostClaim
from bot.adapters.store.uow import UnitOfWorkFactory
from bot.domain.chat_text import unmarked
from bot.logs import logger_for

log = logger_for(__name__)

# The metadata event type of every message the notifier posts; its payload's ``key`` finds the message again.
POST_EVENT_TYPE = "kimi_ops_post"
# How many pages (200 messages each) of a thread or channel a lookup reads before it posts again.
LOOKUP_PAGES = 5
# A post's Web API call ends within IN_FLIGHT: each request waits POST_TIMEOUT at most, and a rate-limited post
# waits out Slack's Retry-After only up to RETRY_AFTER_CAP, at most twice (identity.RATE_LIMIT_RETRIES). So another
# process's claim without a ts older than that is a try that died; a younger one may be a post still on its way.
POST_TIMEOUT = 30
RETRY_AFTER_CAP = 10
IN_FLIGHT = dt.timedelta(seconds=POST_TIMEOUT * (1 + RATE_LIMIT_RETRIES) + RETRY_AFTER_CAP * RATE_LIMIT_RETRIES + 10)


# Slack's answers after which a post may still have been made ("it's possible some aspect of the operation
# succeeded", Slack's docs on internal_error): the outcome is unknown, so the claim stays and the next try looks first.
MAYBE_POSTED = frozenset({"internal_error", "fatal_error", "request_timeout", "service_unavailable"})


def refused(exc: SlackApiError) -> bool:
    """Slack answered that it did not post: not a server error after which it may have."""
    return exc.response.status_code in (200, 429) and exc.response.get("error") not in MAYBE_POSTED


class PostInFlight(Exception):
    """Another try of this post may be on its way to Slack now: try again on a later pass, not now."""

    def __init__(self, key: str, until: dt.datetime) -> None:
        super().__init__(f"{key} is being posted by another try (until {until:%H:%M:%S} UTC at most)")


class BoundedRateLimitRetries(RateLimitErrorRetryHandler):
    """Waits out a 429 only when Slack asks for :data:`RETRY_AFTER_CAP` seconds or less, so a post's call ends
    within :data:`IN_FLIGHT`; a longer wait is Slack's ``ratelimited`` answer, and a later pass tries again."""

    def _can_retry(self, *, state: RetryState, request: HttpRequest, response: HttpResponse | None = None,
                   error: Exception | None = None) -> bool:
        if response is None or not super()._can_retry(state=state, request=request, response=response, error=error):
            return False
        asked = next((values for name, values in response.headers.items() if name.lower() == "retry-after"), None)
        try:
            return asked is None or int(asked[0]) <= RETRY_AFTER_CAP
        except (ValueError, IndexError):
            return False


def bounded_poster(client: WebClient) -> WebClient:
    """``client`` for posts: a connection error may come after Slack took the message, so it is not resent blindly,
    and every call ends within :data:`IN_FLIGHT` (its own timeout, rate-limit waits bounded)."""
    poster = copy.copy(client)
    poster.timeout = POST_TIMEOUT
    poster.retry_handlers = [
        BoundedRateLimitRetries(max_retry_count=RATE_LIMIT_RETRIES) if isinstance(h, RateLimitErrorRetryHandler) else h
        for h in client.retry_handlers if not isinstance(h, ConnectionErrorRetryHandler)
    ]
    return poster


def post_key(message: dict[str, Any]) -> str | None:
    """The key a message the notifier posted carries in its metadata (``None`` for anyone else's message)."""
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != POST_EVENT_TYPE:
        return None
    key = (metadata.get("event_payload") or {}).get("key")
    return str(key) if key is not None else None


def slack_error(exc: BaseException) -> str:
    """What went wrong, in a log line: Slack's error code, or the exception."""
    return str(exc.response.get("error")) if isinstance(exc, SlackApiError) else f"{type(exc).__name__}: {exc}"


class PostOnce:
    """Posts and uploads keyed in ``slack_posts``; ``client`` also reads Slack to find an earlier try's message."""

    def __init__(self, client: WebClient, uow: UnitOfWorkFactory, clock: Clock) -> None:
        self.client = client
        self.poster = bounded_poster(client)
        self.uow = uow
        self.clock = clock
        self._lock = threading.Lock()
        self._sending: set[str] = set()  # keys this process is posting now
        # Key -> the try of this process that holds its claim, ended with no outcome recorded: no wait to look again.
        self._tried: dict[str, str] = {}

    def post(self, key: str, channel: str, text: str, *, blocks: list[dict[str, Any]] | None = None,
             thread_ts: str | None = None, broadcast: bool = False) -> tuple[str, str]:
        """Post the message ``key`` names once, whatever fails around it: its channel and ``ts``."""
        extra: dict[str, Any] = {"thread_ts": thread_ts, "reply_broadcast": broadcast} if thread_ts else {}

        def send() -> tuple[str, str]:
            answer = self.poster.chat_postMessage(
                channel=channel, text=unmarked(text), blocks=blocks,
                metadata={"event_type": POST_EVENT_TYPE, "event_payload": {"key": key}}, **extra,
            )
            return str(answer["channel"]), str(answer["ts"])

        return self.once(key, channel, thread_ts, lambda message: post_key(message) == key, send)

    def upload(self, key: str, channel: str, thread_ts: str | None, data: bytes, *, filename: str, title: str,
               alt_text: str | None = None) -> tuple[str, str]:
        """Upload ``data`` once (``files_upload_v2``): the channel and ``file:<id>`` (a file's id, not a message ts)."""
        extra: dict[str, Any] = {"thread_ts": thread_ts} if thread_ts else {}

        def send() -> tuple[str, str]:
            answer = self.poster.files_upload_v2(channel=channel, file=data, filename=filename, title=title,
                                                 alt_txt=alt_text or title, **extra)
            return channel, f"file:{(answer.get('files') or [{}])[0].get('id', '')}"

        # An upload carries no metadata: an earlier try's file is recognised by its title.
        return self.once(key, channel, thread_ts,
                         lambda message: any(f.get("title") == title for f in message.get("files") or []), send)

    def once(self, key: str, channel: str, thread_ts: str | None, earlier: Callable[[dict[str, Any]], bool],
             send: Callable[[], tuple[str, str]]) -> tuple[str, str]:
        """``send`` what ``key`` names unless it was sent before: where it went.

        The claim is committed before the call and where it went right after it, each on its own, so a delivery
        that fails later (or a replica that stops) leaves a record the retry reuses instead of sending again. A
        claim with no record (an earlier try died mid-call or lost Slack's answer) is looked for first: the
        message ``earlier`` recognises in the thread of ``thread_ts`` (else among the channel's newest), once the
        claim is taken over from the try that held it. Another process's claim younger than :data:`IN_FLIGHT`,
        this process's own still sending, or a claim another try took over first raises :class:`PostInFlight`:
        that try may not have reached Slack yet, so a lookup would not find it.
        """
        try_id = uuid.uuid4().hex
        claim = self._claim(key, channel, try_id)
        if claim.ts is not None:
            return claim.channel, claim.ts
        with self._lock:
            own = claim.first or (claim.try_id is not None and self._tried.get(key) == claim.try_id)
            if key in self._sending or (not own and self.clock.now() - claim.claimed_at < IN_FLIGHT):
                raise PostInFlight(key, claim.claimed_at + IN_FLIGHT)
            self._sending.add(key)
        try:
            # One try at a time: the claim moves to this try only from the one that held it, so two processes
            # finding an expired claim at once cannot both post.
            if not claim.first and not self._take_over(key, claim.try_id, try_id):
                raise PostInFlight(key, self.clock.now() + IN_FLIGHT)
            with self._lock:
                self._tried[key] = try_id
            if not claim.first and (found := self._find(claim.channel, thread_ts, earlier)) is not None:
                self._record(key, claim.channel, found)
                return claim.channel, found
            try:
                sent = send()
            except SlackApiError as exc:
                if refused(exc):
                    self._release(key, try_id)  # Slack answered no: nothing was sent, so the next try need not look
                raise
            self._record(key, *sent)
            return sent
        finally:
            with self._lock:
                self._sending.discard(key)

    def posted(self, key: str) -> tuple[str, str] | None:
        """Where the message ``key`` names went, if it was posted."""
        with self.uow() as uow:
            return uow.posts.posted(key)

    def _claim(self, key: str, channel: str, try_id: str) -> PostClaim:
        with self.uow() as uow:
            claim = uow.posts.claim(key, channel, self.clock.now(), try_id)
            uow.commit()
            return claim

    def _take_over(self, key: str, held_by: str | None, try_id: str) -> bool:
        with self.uow() as uow:
            taken = uow.posts.take_over(key, held_by, try_id, self.clock.now())
            uow.commit()
            return taken

    def _record(self, key: str, channel: str, ts: str) -> None:
        with self.uow() as uow:
            uow.posts.record(key, channel, ts, self.clock.now())
            uow.commit()
        with self._lock:
            self._tried.pop(key, None)

    def _release(self, key: str, try_id: str) -> None:
        with self.uow() as uow:
            uow.posts.release(key, try_id)
            uow.commit()
        with self._lock:
            self._tried.pop(key, None)

    def _find(self, channel: str, thread_ts: str | None, match: Callable[[dict[str, Any]], bool]) -> str | None:
        """The ``ts`` of the message ``match`` picks in the thread of ``thread_ts`` (else among the channel's newest)."""
        cursor: str | None = None
        for _ in range(LOOKUP_PAGES):
            try:
                if thread_ts:
                    page = self.client.conversations_replies(channel=channel, ts=thread_ts, include_all_metadata=True,
                                                             limit=200, cursor=cursor)
                else:
                    page = self.client.conversations_history(channel=channel, include_all_metadata=True, limit=200,
                                                             cursor=cursor)
            except SlackApiError as exc:
                # Without channels:history / groups:history the message cannot be looked for: post it, maybe twice.
                log.warning("cannot look in %s for a message an earlier try may have posted (%s); posting it",
                            channel, slack_error(exc))
                return None
            for message in page.get("messages") or []:
                if match(message):
                    return str(message["ts"])
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if cursor is None:
                return None
        return None
