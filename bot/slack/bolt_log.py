"""Bolt's logger, configured through Bolt's own ``logger=`` argument: a refused request is logged without its body.

Bolt's request verification logs every request it refuses for its signature or timestamp with the whole body
(``slack_bolt.middleware.RequestVerification``). A forged or replayed body is someone else's text, sometimes large,
and a genuine one refused for a stale timestamp carries what a user typed: neither belongs in the log. Bolt gives
every logger it makes its base logger's level and filters, so one filter here keeps the body out and leaves the
refusal, its timestamp and the body's size.
"""

from __future__ import annotations

import logging
import re

from slack_bolt.middleware import RequestVerification

from bot.logs import BOLT_LOGGER

REFUSAL_PREFIX = "Invalid request signature detected"
REFUSAL_FIELDS = re.compile(r"timestamp: ([^,]*), body: ")
REFUSED = "refused a Slack request: its signature or timestamp is not valid (timestamp %s; body of %d characters not logged)"


class WithoutRefusedBodies(logging.Filter):
    """Rewrites Bolt's "invalid request signature" record: the timestamp and the body's length, not the body."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(REFUSAL_PREFIX):
            # Bolt writes "(signature: …, timestamp: …, body: …)".
            found = REFUSAL_FIELDS.search(message)
            record.msg = REFUSED
            record.args = (found.group(1) if found else "unknown", len(message) - found.end() - 1 if found else 0)
        return True


def bolt_logger() -> logging.Logger:
    """The base logger to hand Bolt (``App(logger=…)``), with the filter on it and on the verifier's own logger."""
    log = logging.getLogger(BOLT_LOGGER)
    # Bolt reads its logger's own level, not the effective one, before it builds a debug line for each middleware
    # of each request: left unset (0, "below DEBUG"), it would build them all and log none.
    log.setLevel(log.getEffectiveLevel())
    # Bolt copies the base logger's filters only to a logger that has none yet (one made for an earlier app keeps
    # its own), so the verifier's logger gets the filter directly as well.
    for target in (log, logging.getLogger(f"slack_bolt.{RequestVerification.__name__}")):
        if not any(isinstance(f, WithoutRefusedBodies) for f in target.filters):
            target.addFilter(WithoutRefusedBodies())
    return log
