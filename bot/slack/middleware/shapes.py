"""Requests whose shape our listeners cannot take: acknowledged with 200, the person (if any) told in one line.

A readable body can still lack what a listener reads (a click without
``actions``, a form without its ``view``, a command without its user) or be of
a kind kimi-ops does not handle at all; Bolt would answer such a request 500
or 404, and Slack would show the person "dispatch_failed". Here every kind of
request kimi-ops takes states the fields it needs (:data:`REQUIRED`); a request
missing one is acknowledged, and the person who sent it, when the body names
one, gets a single line (through ``tell``, off the acknowledgement path). A
slash command longer than ``KIMI_SLACK_MAX_COMMAND_CHARS`` is refused here in
its acknowledgement, before anything parses it.

A kind not listed is acknowledged with 200 and nothing run. Kinds Bolt answers
itself (``url_verification``, ``ssl_check``) never reach this middleware.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from slack_bolt import BoltRequest, BoltResponse
from slack_bolt.middleware import Middleware

from bot.logs import logger_for
from bot.slack.middleware.metrics import request_kind

log = logger_for(__name__)

Tell = Callable[[Mapping[str, Any], str], None]  # (request body, the one line for its sender)

# What a listener reads, per kind of request: dotted paths to a non-empty string ("actions.0.action_id": first action).
REQUIRED: dict[str, tuple[str, ...]] = {
    "command": ("command", "user_id"),
    "block_actions": ("user.id", "actions.0.action_id"),
    "view_submission": ("user.id", "view.callback_id"),
    "view_closed": ("user.id", "view.callback_id"),
    "shortcut": ("user.id", "callback_id"),
    "message_action": ("user.id", "callback_id"),
    "event_callback": ("event.type",),
    "block_suggestion": ("user.id", "action_id"),
}

UNREADABLE_LINE = "Slack sent kimi-ops an incomplete request ({missing} missing), so nothing was done; please try again."


def _at(body: Any, path: str) -> Any:
    for key in path.split("."):
        if isinstance(body, list) and key.isdigit():
            body = body[int(key)] if int(key) < len(body) else None
        elif isinstance(body, Mapping):
            body = body.get(key)
        else:
            return None
    return body


def missing(body: Mapping[str, Any], kind: str) -> list[str]:
    """The fields a request of ``kind`` needs and lacks (none for a kind kimi-ops does not take: it is not read)."""
    return [path for path in REQUIRED.get(kind, ()) if not (isinstance(v := _at(body, path), str) and v)]


def too_long(text: str, limit: int) -> str:
    return (f"That command is {len(text):,} characters long; kimi-ops reads at most {limit:,}. "
            "Send a shorter one (`/kimi help` lists them).")


class WellFormed(Middleware):
    """Passes on requests our listeners can read; acknowledges the rest (and tells their sender, if any, in one line)."""

    def __init__(self, max_command_chars: int, tell: Tell) -> None:
        self.max_command_chars = max_command_chars
        self._tell = tell

    def process(self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]) -> BoltResponse | None:
        body = req.body
        kind = request_kind(body)
        if kind not in REQUIRED:
            log.info("acknowledged a Slack request of a kind kimi-ops does not handle (%s)", kind[:50])
            return BoltResponse(status=200, body="")
        lacking = missing(body, kind)
        if lacking:
            log.warning("acknowledged a Slack %s missing %s", kind, ", ".join(lacking))
            line = UNREADABLE_LINE.format(missing=", ".join(lacking))
            if kind == "command":
                return BoltResponse(status=200, body=line)  # the acknowledgement's text reaches the typist
            self._tell(body, line)
            return BoltResponse(status=200, body="")
        if kind == "command":
            text = body.get("text")
            if text is not None and not isinstance(text, str):
                return BoltResponse(status=200, body=UNREADABLE_LINE.format(missing="text"))
            if text and len(text) > self.max_command_chars:
                log.info("refused a %d-character slash command unread", len(text))
                return BoltResponse(status=200, body=too_long(text, self.max_command_chars))
        next()
        return resp
