"""Who the bot is on Slack and which Slack user groups a person belongs to; the Web API client they share.

:func:`bot_identity` reads ``auth.test``: the workspace, organisation and app
the bot token belongs to, so the Slack edge can refuse requests from any other.
:func:`web_client` builds the client with slack_sdk's retry handlers: a 429
waits for Slack's ``Retry-After`` and a reset connection is tried again.

Which Slack user groups a person belongs to, for roles that name groups (``S…`` IDs):

Slack answers "who is in group S" (``usergroups.users.list``), not "which groups
is U in", so the directory asks once per group named in the roles and caches the
member lists for ``ttl_seconds``. A group that cannot be read counts as empty
(fail closed) and is asked again on the next lookup.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler

from bot.config_error import ConfigError
from bot.logs import logger_for

log = logger_for(__name__)


class GroupDirectory:
    """User → user-group IDs, over ``usergroups.users.list`` with a time-bounded cache."""

    def __init__(
        self,
        client: WebClient,
        group_ids: Iterable[str],
        *,
        ttl_seconds: float = 300.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._groups = sorted({g for g in group_ids if g.startswith("S")})
        self._ttl = ttl_seconds
        self._monotonic = monotonic
        self._cache: dict[str, tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    def _members(self, group_id: str) -> frozenset[str]:
        now = self._monotonic()
        with self._lock:
            cached = self._cache.get(group_id)
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        try:
            response = self._client.usergroups_users_list(usergroup=group_id)
        except SlackApiError as exc:
            log.warning("cannot read members of user group %s: %s", group_id, exc.response.get("error"))
            return frozenset()
        members = frozenset(response.get("users") or [])
        with self._lock:
            self._cache[group_id] = (now, members)
        return members

    def groups_of(self, user_id: str) -> frozenset[str]:
        """The role-relevant groups ``user_id`` belongs to."""
        return frozenset(g for g in self._groups if user_id in self._members(g))


@dataclass(frozen=True)
class BotIdentity:
    """What ``auth.test`` says about the bot token: its workspace, organisation (Enterprise Grid) and app."""

    team_id: str | None
    enterprise_id: str | None
    app_id: str | None
    enterprise_install: bool
    user_id: str | None = None  # the bot's own user: how Slack mentions kimi-ops


class SlackUnavailable(ConfigError):
    """Slack's Web API did not answer, or refused the bot token, when kimi-ops asked who it is: one line naming the
    URL and the cause (the CLI's exit 2), never "an unexpected error"."""


def bot_identity(client: WebClient) -> BotIdentity:
    """The bot token's workspace, organisation and app (``auth.test``); :class:`SlackUnavailable` when Slack cannot
    say (unreachable, or the token refused)."""
    url = f"{client.base_url}auth.test"
    try:
        answer = client.auth_test()
    except SlackApiError as exc:
        error = exc.response.get("error") if isinstance(exc.response.data, dict) else exc.response.status_code
        raise SlackUnavailable(f"SLACK_BOT_TOKEN: Slack's Web API at {url} refused the bot token ({error}); give the bot "
                               "token (xoxb-…) of the installed Slack app") from None
    except OSError as exc:  # urllib's URLError, a timeout, a reset: the retries are spent
        reason = getattr(exc, "reason", None) or exc
        raise SlackUnavailable(f"Slack's Web API at {url} did not answer ({reason}); kimi-ops asks it at start which "
                               "app and workspace it serves: check the network to Slack (or KIMI_SLACK_API_URL) and start "
                               "kimi-ops again") from None

    def text(key: str) -> str | None:
        value = answer.get(key)
        return str(value) if value else None

    return BotIdentity(text("team_id"), text("enterprise_id"), text("app_id"), bool(answer.get("is_enterprise_install")),
                       text("user_id"))


# A rate-limited call waits Retry-After and tries again (twice at most: a person is usually waiting).
RATE_LIMIT_RETRIES = 2
CONNECTION_RETRIES = 2


def web_client(token: str, base_url: str | None = None) -> WebClient:
    """A Web API client with rate-limit and connection retries; ``base_url`` (``KIMI_SLACK_API_URL``) points it at a stand-in."""
    retries = [RateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES),
               ConnectionErrorRetryHandler(max_retry_count=CONNECTION_RETRIES)]
    if base_url:
        return WebClient(token=token, base_url=base_url.rstrip("/") + "/", retry_handlers=retries)
    return WebClient(token=token, retry_handlers=retries)
