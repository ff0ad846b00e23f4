"""Delivery of the ``events`` outbox to Slack: after each request that wrote to it, and every few seconds from its own thread.

Rollout watches and scheduled jobs write the outbox while no request runs, so
a periodic pass is needed too; each pass is followed by ``after`` (the App
Home refresh). A failed delivery is logged and retried on the next pass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from bot.adapters.slack.notifier import SlackNotifier
from bot.adapters.store import outbox_writes
from bot.logs import logger_for

log = logger_for(__name__)


class Outbox:
    def __init__(self, notifier: SlackNotifier) -> None:
        self._notifier = notifier
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def deliver_if_written(self) -> None:
        """Deliver when this thread wrote an outbox row since it last looked (a request that only read does not)."""
        if outbox_writes.take():
            self.deliver()

    def deliver(self) -> None:
        try:
            self._notifier.deliver_pending()
        except Exception:
            log.exception("outbox delivery failed; it is retried on the next change")

    def start(self, every_seconds: float, after: Callable[[], None]) -> None:
        """Deliver every ``every_seconds`` on a daemon thread, calling ``after`` each time."""
        def loop() -> None:
            while not self._stop.wait(every_seconds):
                self.deliver()
                after()

        self._thread = threading.Thread(target=loop, name="kimi-outbox", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
