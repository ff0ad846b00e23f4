"""Acknowledge and drop Slack's redeliveries (``X-Slack-Retry-Num``): the first delivery was acknowledged and acted on once."""

from __future__ import annotations

from collections.abc import Callable

from slack_bolt import BoltRequest, BoltResponse
from slack_bolt.middleware import Middleware


class IgnoreRetries(Middleware):
    def process(self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]) -> BoltResponse | None:
        if req.headers.get("x-slack-retry-num"):
            # Slack re-sends what it thinks we missed; we acknowledged it the first time and act once.
            return BoltResponse(status=200, body="")
        next()
        return resp
