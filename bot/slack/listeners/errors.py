"""What escapes a listener or a middleware: logged once with a correlation id, and never answered 500.

Bolt answers 500 to an exception in an acknowledgement or a middleware, which
Slack shows as "dispatch_failed" and the person gets nothing. Here the
acknowledgement becomes a 200 instead; a slash command's carries one line
with the correlation id, which the typist sees. An error in a job's handler
(after the acknowledgement) has no response to change: the person already got
their answer or their correlation id from :func:`bot.slack.answers.guard`.
"""

from __future__ import annotations

import uuid
from typing import Any

from slack_bolt import App, BoltResponse
from slack_bolt.error import BoltUnhandledRequestError

from bot.logs import logger_for
from bot.slack.middleware.metrics import request_kind

log = logger_for(__name__)


def register(app: App) -> None:
    def on_error(error: Exception, body: dict[str, Any], response: BoltResponse | None) -> BoltResponse | None:
        if isinstance(error, BoltUnhandledRequestError):  # no listener took it (the app raises, not answers 404)
            log.info("no listener took a Slack %s; acknowledged", request_kind(body if isinstance(body, dict) else {}))
            return BoltResponse(status=200, body="")
        correlation = uuid.uuid4().hex[:12]
        log.error("listener error", exc_info=error, extra={"correlation_id": correlation})
        if response is None:
            return None  # already acknowledged
        line = (f"kimi-ops hit an unexpected error; ask an operator to look up correlation id `{correlation}` in its log."
                if isinstance(body, dict) and "command" in body else "")
        return BoltResponse(status=200, body=line)

    app.error(on_error)
