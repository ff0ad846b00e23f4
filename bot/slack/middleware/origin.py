"""Serve only requests from our own Slack app, workspace and organisation; refuse the rest before any listener runs.

Bolt checks that Slack signed a request, not that it is meant for us: a signed
click from another workspace or app would otherwise decide a gate. Every app,
workspace (team) and Enterprise Grid organisation a request names — ``api_app_id``,
``team_id``/``team.id``/``user.team_id``/``view.team_id``,
``enterprise_id``/``enterprise.id``/``team.enterprise_id`` in slash commands,
interactivity payloads and Events API bodies alike — must be ours. A request
naming no app is refused too: Slack always names the app. The refusal is
acknowledged with 200 and nothing else (the sender learns nothing), and
audited through the ``refused`` callback.

What is "ours" comes from :class:`Origin`: the settings
``KIMI_SLACK_ALLOWED_TEAM_IDS``, ``KIMI_SLACK_ENTERPRISE_ID`` and
``KIMI_SLACK_APP_ID``, each defaulting to what the bot token's ``auth.test``
says (:func:`origin_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slack_bolt import BoltRequest, BoltResponse
from slack_bolt.middleware import Middleware

from bot.adapters.slack.identity import BotIdentity
from bot.config import ConfigError, Settings
from bot.logs import logger_for
from bot.slack.middleware.metrics import request_kind

log = logger_for(__name__)


@dataclass(frozen=True)
class Origin:
    """Where requests may come from: our app, these workspaces (none: any of our organisation), our organisation."""

    app_id: str
    team_ids: frozenset[str]
    enterprise_id: str | None


def origin_of(settings: Settings, bot: BotIdentity) -> Origin:
    """The settings, each unset one learned from ``auth.test``; :class:`ConfigError` when either cannot be told."""
    app_id = settings.slack_app_id or bot.app_id
    if not app_id:
        raise ConfigError("KIMI_SLACK_APP_ID: Slack's auth.test did not name this app; set it to the app's ID, e.g. A0123ABCD")
    enterprise_id = settings.slack_enterprise_id or bot.enterprise_id
    teams = set(settings.slack_allowed_team_ids)
    if not teams and bot.team_id and not bot.enterprise_install:
        teams = {bot.team_id}
    if not teams and not enterprise_id:
        raise ConfigError("KIMI_SLACK_ALLOWED_TEAM_IDS: Slack's auth.test named no workspace; "
                          'set the workspace IDs to serve, e.g. ["T0123ABCD"]')
    return Origin(app_id, frozenset(teams), enterprise_id)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _inner(body: Mapping[str, Any], key: str, field: str) -> str | None:
    inner = body.get(key)
    return _text(inner.get(field)) if isinstance(inner, Mapping) else None


def claimed(body: Mapping[str, Any]) -> dict[str, set[str]]:
    """Every app, team and enterprise ID the request names, wherever its kind of payload puts them."""
    apps = {_text(body.get("api_app_id")), _inner(body, "view", "app_id")}
    teams = {_text(body.get("team_id")), _inner(body, "team", "id"), _inner(body, "user", "team_id"),
             _inner(body, "view", "team_id")}
    enterprises = {_text(body.get("enterprise_id")), _inner(body, "enterprise", "id"), _inner(body, "team", "enterprise_id")}
    return {"app": {a for a in apps if a}, "team": {t for t in teams if t}, "enterprise": {e for e in enterprises if e}}


def foreign(body: Mapping[str, Any], ours: Origin) -> str | None:
    """Why the request is not ours (one phrase), or None when it is."""
    named = claimed(body)
    if not named["app"]:
        return "names no app"
    if named["app"] != {ours.app_id}:
        return "comes from another app"
    if named["enterprise"] and named["enterprise"] != {ours.enterprise_id}:
        return "comes from another organisation"
    if ours.team_ids:
        if not named["team"]:
            return "names no workspace"
        if not named["team"] <= ours.team_ids:
            return "comes from another workspace"
    elif not named["enterprise"]:
        # Served org-wide (any workspace of our organisation): the request must say it is of our organisation.
        return "names no organisation"
    return None


def _user(body: Mapping[str, Any]) -> str | None:
    return _text(body.get("user_id")) or _inner(body, "user", "id") or _inner(body, "event", "user")


def _joined(values: set[str]) -> str | None:
    return ",".join(sorted(values))[:200] or None


class OnlyOurWorkspace(Middleware):
    """Acknowledges (200, empty) and audits a request from another app, workspace or organisation; passes ours on."""

    def __init__(self, ours: Origin, refused: Callable[[str | None, str, str, dict[str, str | None]], None]) -> None:
        self.ours = ours
        self._refused = refused

    def process(self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]) -> BoltResponse | None:
        why = foreign(req.body, self.ours)
        if why is None:
            next()
            return resp
        named = claimed(req.body)
        origin = {"app": _joined(named["app"]), "team": _joined(named["team"]), "enterprise": _joined(named["enterprise"])}
        kind = request_kind(req.body)
        log.warning("refused a signed Slack %s that %s (%s)", kind, why, origin)
        try:
            self._refused(_user(req.body), kind, why, origin)
        except Exception:
            # The refusal stands without its audit row (the database may be down); the log above still has it.
            log.exception("could not audit a refused Slack request")
        return BoltResponse(status=200, body="")
