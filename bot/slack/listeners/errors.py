"""What escapes a listener: logged once with a correlation id (the person already got theirs, or Bolt's 500)."""

from __future__ import annotations

import logging
import uuid

from slack_bolt import App

log = logging.getLogger("kimi_ops.slack")


def register(app: App) -> None:
    def on_error(error: Exception) -> None:
        correlation = uuid.uuid4().hex[:12]
        log.error("listener error", exc_info=error, extra={"correlation_id": correlation})

    app.error(on_error)
