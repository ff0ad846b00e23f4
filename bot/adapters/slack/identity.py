"""Which Slack user groups a person belongs to, for roles that name groups (``S…`` IDs).

Slack answers "who is in group S" (``usergroups.users.list``), not "which groups
is U in", so the directory asks once per group named in the roles and caches the
member lists for ``ttl_seconds``. A group that cannot be read counts as empty
(fail closed) and is asked again on the next lookup.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

log = logging.getLogger(__name__)


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


def web_client(token: str, base_url: str | None = None) -> WebClient:
    """A Web API client; ``base_url`` (``KIMI_SLACK_API_URL``) points it at a stand-in such as the tests' stub."""
    if base_url:
        return WebClient(token=token, base_url=base_url.rstrip("/") + "/")
    return WebClient(token=token)
