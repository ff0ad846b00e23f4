"""Count Slack requests and time their acknowledgement, per kind: ``kimi_slack_requests``, ``kimi_slack_ack_seconds``.

This one wraps ``App.dispatch`` instead of being a Bolt ``@app.middleware``:
sync Bolt runs its middleware as a pipeline (``next()`` returns before any
listener runs), so no middleware sees the status and time of the
acknowledgement. Wrapping dispatch counts every transport the same way (Bolt's
WSGI adapter, the Socket Mode handler, the local shell), refused requests (401)
included.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from slack_bolt import App, BoltRequest, BoltResponse

ACK_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5)


class SlackMetrics:
    """Request counts and acknowledgement latency, per kind of Slack request, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("kimi_slack_requests", "Slack requests received", ["kind", "status"], registry=self.registry)
        self.latency = Histogram("kimi_slack_ack_seconds", "Time from receiving a Slack request to its acknowledgement",
                                 ["kind"], registry=self.registry, buckets=ACK_BUCKETS)

    def observe(self, kind: str, status: int, seconds: float) -> None:
        self.latency.labels(kind).observe(seconds)
        self.requests.labels(kind, str(status)).inc()


# The kinds counted under their own name; any other ``type`` (a sender's free text) is ``other``, so labels stay few.
KINDS = frozenset({"block_actions", "view_submission", "view_closed", "shortcut", "message_action", "event_callback",
                   "block_suggestion", "url_verification", "interactive_message", "dialog_submission"})


def request_kind(body: Mapping[str, Any]) -> str:
    """``command``, ``block_actions``, ``view_submission``, ``event_callback``… from a parsed Slack body (HTTP or Socket Mode)."""
    if "command" in body:
        return "command"
    kind = body.get("type")
    return kind if isinstance(kind, str) and kind in KINDS else "other"


class MeteredApp(App):
    """Bolt's ``App`` whose every dispatch (up to the acknowledgement) is counted and timed into ``metrics``."""

    def __init__(self, *, metrics: SlackMetrics, **kwargs: Any) -> None:
        # Named: unnamed, Bolt takes its caller's file name from inspect.stack(), which reads the source of every
        # frame on the stack (50 ms of CPU for each app a test builds under pytest's deep stack).
        kwargs.setdefault("name", "kimi-ops")
        super().__init__(**kwargs)
        self.metrics = metrics

    def dispatch(self, req: BoltRequest) -> BoltResponse:
        started = time.perf_counter()
        response = super().dispatch(req)
        self.metrics.observe(request_kind(req.body), response.status, time.perf_counter() - started)
        return response
