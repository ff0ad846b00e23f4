"""The App Homes this replica keeps current: who opened theirs, and the status version they last saw.

A Home is re-published for those people after each outbox delivery, and
whenever ``status_version`` moved: another replica may have delivered the
change (Slack sends each event to one Socket Mode connection), and a passing
readiness probe emits no event at all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from slack_sdk import WebClient

from bot.adapters.slack.blocks import home_view
from bot.logs import logger_for
from bot.services.access import Identity
from bot.services.context import Context
from bot.services.readiness import status_version
from commands import home

log = logger_for(__name__)

HOME_VIEWERS_MAX = 1000


class HomeCache:
    def __init__(self, ctx: Context, client: WebClient, identity: Callable[[str], Identity]) -> None:
        self._ctx = ctx
        self._client = client
        self._identity = identity
        self._viewers: dict[str, None] = {}  # insertion-ordered: the oldest viewer is forgotten first
        self._lock = threading.Lock()
        self._version: tuple[int, int] | None = None

    def opened(self, user: str) -> None:
        """``user`` opened their Home: remember them and show it now."""
        with self._lock:
            self._viewers[user] = None
            while len(self._viewers) > HOME_VIEWERS_MAX:
                self._viewers.pop(next(iter(self._viewers)))
        self.publish(user)

    def publish(self, user: str) -> None:
        try:
            parts = home.parts(self._ctx, self._identity(user))
            self._client.views_publish(user_id=user, view=home_view(parts))
        except Exception:
            log.exception("could not publish the App Home of %s", user)

    def refresh_if_changed(self) -> None:
        """Re-render the Homes this replica's users opened when anything changed, on any replica."""
        with self._lock:
            if not self._viewers:
                return
        try:
            version = status_version(self._ctx)
        except Exception:
            log.exception("could not read the status version; Homes are refreshed on the next change")
            return
        if version != self._version:
            self._version = version
            self.refresh_all()

    def refresh_all(self, _endpoints: set[str] | None = None) -> None:
        """Re-publish every remembered Home (the notifier calls this after a delivery, with the endpoints touched)."""
        with self._lock:
            viewers = list(self._viewers)
        for user in viewers:
            self.publish(user)
