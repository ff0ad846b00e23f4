"""One answer per Slack request across every replica: claim the request in the shared database before handling it.

Bolt's own verification (before any of our middleware) refuses a forged
signature or a stale timestamp. What passes is claimed by its key
(:func:`delivery_key`) through :func:`bot.services.deliveries.first_delivery`;
exactly one replica's claim wins, and the others:

* answer 401 to an exact replay of a signed HTTP request (as before, but now
  across replicas: the same signed ``/kimi status`` sent to two replicas runs once);
* acknowledge (200) and drop a redelivery (``X-Slack-Retry-Num``) whose original
  was taken on, so Slack stops retrying — while a redelivery whose original never
  arrived wins the claim and runs;
* in Socket Mode, acknowledge and drop any second copy (an envelope left
  unacknowledged is sent again, possibly on another replica's connection).

The key names the request, not the envelope: Slack re-signs a redelivery with a
new timestamp (so the signature changes, and cannot be the key) but keeps its
body. An Events API request is keyed by its ``event_id``, Slack's own name for
the event, the same on every retry. Everything else (slash commands, buttons,
modal submissions…) is keyed by the SHA-256 of its body: the body holds the
``trigger_id`` Slack makes for that one invocation, so two invocations never
share a key — even the same text typed twice — while a redelivery or a replay
repeats it byte for byte. (A key of the ``trigger_id`` alone would also merge two
different requests that happen to carry the same one; the body cannot.)

Under ``kimi-ops serve`` the answering process first answers a copy this replica acknowledged already from its
local memory and spool (:class:`OncePerReplica`), then claims the request as it records its job, in one
transaction (:class:`bot.slack.intake.DurableIntake`), so a copy sent to another replica is acknowledged 200
there and dropped.

The claim waits at most ``wait_seconds``: Slack wants its acknowledgement within
3 seconds, and a database that does not answer must not cost every request its
answer. Then (or when the claim fails) the request is handled unclaimed and the
log says so; with the database down its work fails anyway and says so to the person.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from slack_bolt import BoltRequest, BoltResponse
from slack_bolt.middleware import Middleware

from bot.adapters.store.spool import Spool
from bot.logs import logger_for
from bot.services.context import Context
from bot.services.deliveries import DELIVERY_MEMORY, first_delivery, forget_old_deliveries
from bot.slack.middleware.retries import retry_number

log = logger_for(__name__)

KEY = "kimi_delivery_key"  # a Bolt context key: the request's key, computed once by the guard
NOTE = "kimi_note_key"  # a Bolt context key: OncePerReplica let this request through, its key to be written
CLAIM_WAIT_SECONDS = 1.5
PURGE_EVERY_SECONDS = 60.0
MAX_KEY = 200  # the column's length


def delivery_key(body: Mapping[str, Any], raw_body: str) -> str:
    """What identifies this request across deliveries (see the module docstring)."""
    if body.get("event_id"):
        key = f"event:{_team(body)}:{body['event_id']}"
        return key if len(key) <= MAX_KEY else "event:" + hashlib.sha256(key.encode("utf-8")).hexdigest()
    return "body:" + hashlib.sha256(raw_body.encode("utf-8")).hexdigest()


def raw_body(req: BoltRequest) -> str:
    """The body the key is made of; Bolt keeps no raw body for a Socket Mode envelope: its payload, serialised
    the same way every time, stands in."""
    return req.raw_body if req.mode == "http" else json.dumps(req.body, sort_keys=True, separators=(",", ":"))


def answer_copy(req: BoltRequest) -> BoltResponse:
    """The answer to a copy of a request already taken on: a redelivery is acknowledged (so Slack stops), a
    replay of a signed HTTP request refused."""
    if req.mode == "socket_mode" or retry_number(req) is not None:
        log.info("acknowledged and dropped a Slack request another delivery already took on")
        return BoltResponse(status=200, body="")
    log.warning("refused a replayed Slack request")
    return BoltResponse(status=401, body="")


def _team(body: Mapping[str, Any]) -> str:
    team = body.get("team_id") or body.get("team")
    if isinstance(team, Mapping):
        team = team.get("id")
    return str(team or "-")


class OncePerRequest(Middleware):
    """Claims each verified request in the database; a request another delivery claimed is refused or dropped."""

    def __init__(
        self,
        ctx: Context,
        *,
        wait_seconds: float = CLAIM_WAIT_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        inline: bool = False,
    ) -> None:
        self.ctx = ctx
        self.wait_seconds = wait_seconds
        # ``inline``: claim on the request's own thread, where the database bounds its own waits (SQLite's busy
        # timeout set to ``wait_seconds``); handing each claim to the pool and back costs more than the claim.
        self.inline = inline
        self._monotonic = monotonic
        # Claims run here so a request thread waits a bounded time for a database that hangs.
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kimi-claim")
        self._purged_at: float | None = None
        self._lock = threading.Lock()

    def first(self, key: str) -> bool | None:
        """``True`` claimed here, ``False`` claimed before, ``None`` unknown (the database failed or was too slow)."""
        self._purge_now_and_then()
        if self.inline:
            try:
                return first_delivery(self.ctx, key)
            except Exception as exc:  # the lock was held past the bound, or the database is away
                log.warning("could not claim a Slack request (%s); handling it unclaimed", type(exc).__name__)
                return None
        future = self._pool.submit(first_delivery, self.ctx, key)
        try:
            return future.result(timeout=self.wait_seconds)
        except FutureTimeout:
            log.warning("the database did not answer within %.1f s; handling a Slack request unclaimed", self.wait_seconds)
        except Exception as exc:  # never a traceback instead of an acknowledgement
            log.warning("could not claim a Slack request (%s); handling it unclaimed", type(exc).__name__)
        return None

    def _purge_now_and_then(self) -> None:
        now = self._monotonic()
        with self._lock:
            if self._purged_at is not None and now - self._purged_at < PURGE_EVERY_SECONDS:
                return
            self._purged_at = now
        self._pool.submit(self._purge)

    def _purge(self) -> None:
        try:
            forget_old_deliveries(self.ctx)
        except Exception as exc:  # the next purge catches up
            log.warning("could not forget old Slack deliveries (%s)", type(exc).__name__)

    def process(self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]) -> BoltResponse | None:
        key = req.context[KEY] = delivery_key(req.body, raw_body(req))
        if self.first(key) is False:
            return answer_copy(req)
        next()
        return resp

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class OncePerReplica(Middleware):
    """The answering process of ``kimi-ops serve``: a copy of a request this replica acknowledged is answered
    from what this replica noted, before any SQL; the claim across replicas is made as the request's job is
    recorded (:class:`bot.slack.intake.DurableIntake`).

    The keys acknowledged in the last :data:`DELIVERY_MEMORY` are held in memory (read back from the spool at
    start), so telling a copy costs no SQL; each is written to the spool by :meth:`note_unspooled` after Bolt's
    dispatch, before its acknowledgement leaves (a sync Bolt middleware's ``next()`` returns before the listener
    runs). A spool that cannot be written (a full disk) lets the request through: the shared claim still holds.
    """

    def __init__(self, spool: Spool, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.spool = spool
        self._monotonic = monotonic
        self._purged_at: float | None = None
        self._lock = threading.Lock()
        try:
            self._seen = spool.seen_since(DELIVERY_MEMORY.total_seconds())
        except Exception as exc:  # the worker's claim still refuses a copy
            log.warning("could not read the requests this replica acknowledged (%s)", type(exc).__name__)
            self._seen = {}

    def process(self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]) -> BoltResponse | None:
        key = req.context[KEY] = delivery_key(req.body, raw_body(req))
        now = time.time()
        with self._lock:
            first = key not in self._seen
            self._seen.setdefault(key, now)
        if not first:
            return answer_copy(req)
        req.context[NOTE] = True
        self._purge_now_and_then(now)
        next()
        return resp

    def note_unspooled(self, req: BoltRequest) -> None:
        """After the dispatch of a request this guard let through: write its key to the spool, so a copy is still
        refused after a restart."""
        if not req.context.get(NOTE):
            return
        try:
            self.spool.first(req.context[KEY])
        except Exception as exc:
            log.warning("could not note a Slack request in the spool (%s)", type(exc).__name__)

    def _purge_now_and_then(self, now: float) -> None:
        at = self._monotonic()
        if self._purged_at is not None and at - self._purged_at < PURGE_EVERY_SECONDS:
            return
        self._purged_at = at
        memory = DELIVERY_MEMORY.total_seconds()
        with self._lock:
            self._seen = {key: seen for key, seen in self._seen.items() if seen >= now - memory}
        try:
            self.spool.forget_seen_before(memory)
        except Exception as exc:  # the next purge catches up
            log.warning("could not forget old Slack requests in the spool (%s)", type(exc).__name__)
