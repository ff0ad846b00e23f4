"""The thread pools behind the Slack app: Bolt's listeners and the jobs run here on one, the engine's follow-ups on another."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class CountingExecutor(ThreadPoolExecutor):
    """A bounded pool counting work not yet finished, so a local console (or a test) can wait for quiet."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self.size = max_workers
        self._pending = 0
        self._quiet = threading.Condition()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._quiet:
            self._pending += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: Future[Any]) -> None:
        with self._quiet:
            self._pending -= 1
            self._quiet.notify_all()

    def wait_idle(self, timeout: float = 60.0) -> bool:
        with self._quiet:
            return self._quiet.wait_for(lambda: self._pending == 0, timeout)
