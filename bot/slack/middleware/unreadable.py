"""A signed body Bolt cannot read (``payload=`` not JSON, ``[]``, ``null``, a field of the wrong type): 200, nothing run.

Bolt parses the body while building its request, before any middleware runs,
so an unreadable one would escape as HTTP 500 (Slack then shows
"dispatch_failed"). :func:`bolt_request` builds the request every transport
hands to the app instead: a body Bolt cannot read becomes an empty one marked
in the request context, keeping the raw bytes so Bolt's signature check still
runs on exactly what was signed (a forged one stays 401). :class:`Unreadable`
then acknowledges the marked request and runs nothing: no person can be named
from a body that cannot be read. A slash command whose text holds the word
"payload" is read as the form it is (Bolt would take it for an interactivity payload).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from urllib.parse import parse_qsl

from slack_bolt import BoltRequest, BoltResponse
from slack_bolt.middleware import Middleware
from slack_bolt.request.internals import build_context

from bot.logs import logger_for

log = logger_for(__name__)

UNREADABLE = "kimi_unreadable_body"  # the context key holding why the body could not be read


def read_as_form(request: BoltRequest) -> BoltRequest:
    """``request`` with its form fields, where Bolt took a form holding the word "payload" for an empty payload.

    Bolt (1.30) reads any form body containing "payload" as an interactivity payload, so a slash command such as
    ``/kimi exception add … kind=payload-capture`` would arrive with no fields. Every request the app receives
    passes through here.
    """
    raw = request.raw_body
    if request.body == {} and "payload" in raw and not raw.lstrip().startswith("{"):
        fields = dict(parse_qsl(raw, keep_blank_values=True))
        if fields and "payload" not in fields:
            request.body = fields
            request.context = build_context(request.context, fields)
    return request


def bolt_request(body: str, query: str | None, headers: Mapping[str, Sequence[str] | str]) -> BoltRequest:
    """Bolt's request for an HTTP body; one it cannot read is kept raw (for the signature) and marked unreadable."""
    try:
        request = BoltRequest(body=body, query=query, headers=dict(headers))
        parsed: object = request.body  # typed a dict by Bolt, but whatever json.loads returned
        if isinstance(parsed, dict):
            return read_as_form(request)
        why = f"the body is a JSON {type(parsed).__name__}, not an object"
    except Exception as exc:  # Bolt raises whatever json.loads or its field lookups raise
        why = f"{type(exc).__name__} while reading the body"
    request = BoltRequest(body="", query=query, headers=dict(headers))
    request.raw_body = body  # what Slack signed: RequestVerification checks these bytes
    request.context[UNREADABLE] = why
    return request


class Unreadable(Middleware):
    def process(self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]) -> BoltResponse | None:
        why = req.context.get(UNREADABLE)
        if why:
            log.warning("acknowledged a signed Slack request whose body cannot be read (%s; %d bytes)", why, len(req.raw_body))
            return BoltResponse(status=200, body="")
        next()
        return resp
