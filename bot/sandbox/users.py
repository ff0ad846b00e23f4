"""Background "user traffic" for the sandbox: a few chat completions a second through the gateway stand-in.

The sandbox's gateway only means something when someone uses it. :class:`UserTraffic`
plays the endpoint's users: every ``1 / per_second`` seconds it sends one short chat
completion to the gateway's listener, a ``cohort_share`` of them with the internal
cohort's header, each carrying the OpenAI ``user`` field (``sandbox-user`` or
``sandbox-cohort``) so the model servers can count user requests apart from the
bot's own. Every answer is kept as a :class:`UserRequest`: when it was sent, whether
it was the cohort's, and which model answered (the ``model`` field of the answer,
or ``HTTP 404`` / ``HTTP 500`` / ``error`` when none did).

Requests run on their own threads, bounded by ``max_in_flight`` (a request that
would exceed it is skipped and counted), so a slow model never slows the arrival
rate and a stopped one never piles threads up.
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType

import httpx

from bot.logs import logger_for

log = logger_for(__name__)

USER = "sandbox-user"
COHORT_USER = "sandbox-cohort"
PROMPT = "Summarise the release notes in one line."


@dataclass(frozen=True)
class UserRequest:
    """One user request and what answered it."""

    at: dt.datetime
    cohort: bool
    outcome: str  # the answering model's name, or "HTTP <status>" / "error"


class UserTraffic:
    """Start with ``UserTraffic(gateway_url, cohort=(header, value)).start()``; :meth:`stop` ends it.

    ``cohort`` may be a function giving the header and value now (the sandbox reads the token from its Secret for
    every cohort request, as an application layer does); ``None`` from it sends that request without the header.
    """

    def __init__(self, url: str, *, cohort: tuple[str, str] | Callable[[], tuple[str, str] | None],
                 per_second: float = 4.0, cohort_share: float = 0.25,
                 max_in_flight: int = 16, max_tokens: int = 8, timeout: float = 60.0) -> None:
        if per_second <= 0:
            raise ValueError("user traffic needs a positive rate (requests per second)")
        self.url = url.rstrip("/")
        self.cohort = cohort
        self.per_second = per_second
        self.cohort_share = cohort_share
        self.max_in_flight = max_in_flight
        self.max_tokens = max_tokens
        self.skipped = 0
        self._client = httpx.Client(timeout=timeout)
        self._log: list[UserRequest] = []
        self._lock = threading.Lock()
        self._in_flight = threading.BoundedSemaphore(max_in_flight)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._workers: set[threading.Thread] = set()

    def start(self) -> UserTraffic:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sandbox-users", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        with self._lock:
            workers = list(self._workers)
        for worker in workers:
            worker.join(5)
        self._client.close()

    def __enter__(self) -> UserTraffic:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- what users got ---------------------------------------------------------------------------------------

    def requests(self, since: dt.datetime | None = None, until: dt.datetime | None = None) -> list[UserRequest]:
        """The answered requests sent in ``[since, until)``, oldest first."""
        with self._lock:
            found = [r for r in self._log if (since is None or r.at >= since) and (until is None or r.at < until)]
        return sorted(found, key=lambda r: r.at)

    @staticmethod
    def tally(requests: Iterable[UserRequest]) -> Counter[tuple[bool, str]]:
        """``(cohort, outcome) → count``."""
        return Counter((r.cohort, r.outcome) for r in requests)

    # -- the generator ----------------------------------------------------------------------------------------

    def _run(self) -> None:
        interval = 1.0 / self.per_second
        # Every n-th request is the cohort's: a fixed pattern, so a short window still holds both kinds.
        every = max(1, round(1 / self.cohort_share)) if self.cohort_share > 0 else 0
        for number in itertools.count():
            if self._stop.wait(interval):
                return
            if not self._in_flight.acquire(blocking=False):
                self.skipped += 1
                continue
            cohort = every > 0 and number % every == 0
            worker = threading.Thread(target=self._send, args=(cohort,), name="sandbox-user", daemon=True)
            with self._lock:
                self._workers.add(worker)
            worker.start()

    def _send(self, cohort: bool) -> None:
        at = dt.datetime.now(dt.UTC)
        pair = (self.cohort() if callable(self.cohort) else self.cohort) if cohort else None
        headers = {pair[0]: pair[1]} if pair else {}
        body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": self.max_tokens,
                "user": COHORT_USER if cohort else USER}
        try:
            response = self._client.post(f"{self.url}/v1/chat/completions", json=body, headers=headers)
            outcome = _outcome(response)
        except httpx.HTTPError as exc:
            log.debug("sandbox user request failed: %s", exc)
            outcome = "error"
        finally:
            self._in_flight.release()
            with self._lock:
                self._workers.discard(threading.current_thread())
        if not self._stop.is_set():
            with self._lock:
                self._log.append(UserRequest(at=at, cohort=cohort, outcome=outcome))


def _outcome(response: httpx.Response) -> str:
    if response.status_code != 200:
        return f"HTTP {response.status_code}"
    try:
        model = response.json().get("model")
    except ValueError:
        return "error"
    return str(model) if model else "error"
