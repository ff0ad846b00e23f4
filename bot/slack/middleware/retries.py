"""Slack's redeliveries: ``X-Slack-Retry-Num`` over HTTP (Bolt mirrors a Socket Mode envelope's ``retry_attempt`` into it).

A redelivery is not dropped on sight any more: Slack re-sends what it thinks we
missed, and when the original never reached any replica the redelivery is the
only copy. :mod:`bot.slack.middleware.replay_guard` runs it when no replica has
taken the original on, and acknowledges and drops it when one has.
"""

from __future__ import annotations

from slack_bolt import BoltRequest


def retry_number(req: BoltRequest) -> int | None:
    """Which redelivery this is (1, 2, 3…), or ``None`` for a first delivery."""
    value = (req.headers.get("x-slack-retry-num") or [""])[0]
    try:
        return int(value) if value else None
    except ValueError:  # not Slack's header: treat as a redelivery of unknown number
        return 0
