"""``POST /alertmanager/webhook``: Alertmanager's webhook receiver on ``kimi-ops serve``'s HTTP port.

Alertmanager sends ``Authorization: Bearer <token>`` (``http_config.authorization.credentials_file`` in its
receiver, from the same Secret as ``KIMI_ALERTMANAGER_WEBHOOK_TOKEN``). Answers, each a short line:

* 401 without that token (and for every request while no token is set), 405 for another method, 413 for a body
  over a megabyte, 400 for a body that is not a version-4 notification — nothing changed in each case;
* 200 once the incidents are recorded (:func:`bot.services.alert_intake.receive_notification`); the pages are
  posted by the outbox right after;
* 503 when the database cannot take them now: Alertmanager retries the notification, so nothing is lost.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import ValidationError

from bot.domain.alertmanager import MAX_BODY, WebhookNotification
from bot.logs import logger_for
from bot.services.alert_intake import receive_notification
from bot.services.context import Context

PATH = "/alertmanager/webhook"
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

log = logger_for(__name__)


def _answer(start_response: Callable[..., Any], status: str, line: str,
            headers: tuple[tuple[str, str], ...] = ()) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), *headers])
    return [(line + "\n").encode()]


def _authorised(environ: dict[str, Any], token: str | None) -> bool:
    given = str(environ.get("HTTP_AUTHORIZATION", ""))
    scheme, _, credentials = given.partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(),
                                                                              str(token).encode())


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "(body)"
    return f"{where}: {first.get('msg', 'invalid')}"


def webhook_app(ctx: Context, after: Callable[[], None]) -> WsgiApp:
    """The receiver; ``after`` runs once a notification changed something (the outbox delivers the pages)."""

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not _authorised(environ, ctx.settings.alertmanager_webhook_token):
            return _answer(start_response, "401 Unauthorized", "a bearer token is required (KIMI_ALERTMANAGER_WEBHOOK_TOKEN)",
                           (("WWW-Authenticate", 'Bearer realm="kimi-ops"'),))
        if environ.get("REQUEST_METHOD") != "POST":
            return _answer(start_response, "405 Method Not Allowed", "POST Alertmanager's webhook notification here",
                           (("Allow", "POST"),))
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            return _answer(start_response, "413 Content Too Large" if length > MAX_BODY else "400 Bad Request",
                           f"the body must be a JSON notification of at most {MAX_BODY} bytes")
        try:
            notification = WebhookNotification.model_validate(json.loads(environ["wsgi.input"].read(length)))
        except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested deeper than the parser goes
            said = _first_error(exc) if isinstance(exc, ValidationError) else "the body is not JSON"
            return _answer(start_response, "400 Bad Request", f"not an Alertmanager version-4 notification: {said}")
        try:
            intake = receive_notification(ctx, notification)
        except Exception:  # the database went away: 503 makes Alertmanager retry, so the page is not lost
            log.exception("an Alertmanager notification could not be recorded; Alertmanager retries it")
            return _answer(start_response, "503 Service Unavailable", "not recorded now; retry")
        if intake.opened or intake.closed:
            after()
        return _answer(start_response, "200 OK", intake.summary)

    return application
