"""One httpx client per adapter, made on first use, shared by every thread, closed only at process end.

Building a client loads the CA certificates (~30 ms of CPU) and its pool keeps connections alive, so the
endpoint client (completions, ``/metrics``) and the DCGM reader each keep one rather than one per call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx


class KeptClient:
    """``get()`` the client (``make()`` builds it the first time, or again after :meth:`close`)."""

    def __init__(self, make: Callable[[], httpx.Client]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None

    def get(self) -> httpx.Client:
        with self._lock:
            if self._client is None or self._client.is_closed:
                self._client = self._make()
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
