"""Refuse an exact replay of a signed request inside Slack's 5-minute freshness window (per process).

Bolt's own verification (before any of our middleware) already refuses a
forged signature or a stale timestamp; a signature it accepted is seen once.
Socket Mode requests carry no signature and pass untouched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from slack_bolt import BoltRequest, BoltResponse
from slack_bolt.middleware import Middleware

log = logging.getLogger("kimi_ops.slack")

REPLAY_WINDOW_SECONDS = 300


class ReplayGuard(Middleware):
    """Remembers signatures seen within the window; a second sighting is a replay (401)."""

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

    def process(self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]) -> BoltResponse | None:
        signature = (req.headers.get("x-slack-signature") or [""])[0]
        if signature and not self.first_sighting(signature):
            log.warning("refused a replayed Slack request")
            return BoltResponse(status=401, body="")
        next()
        return resp
