"""An endpoint's settings as the database stores them, validated once per change rather than on every page.

The stored copy holds what only the database knows (request limits accepted at a traffic gate), so status and
App Home read it for every endpoint shown; validating 500 of them with pydantic took most of a fleet status
render. The validated value is kept beside the exact stored mapping it came from and reused only while the
stored mapping is equal to it: a changed row (any key, any replica) is validated again, so nothing shown is
older than the database.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

from bot.config import EndpointSettings

_validated: dict[str, tuple[dict[str, Any], EndpointSettings]] = {}
_lock = threading.Lock()


def stored_settings(name: str, stored: Mapping[str, Any]) -> EndpointSettings:
    """``stored`` validated as :class:`EndpointSettings`; the same (read-only) value while ``stored`` is unchanged."""
    with _lock:
        hit = _validated.get(name)
    if hit is not None and hit[0] == stored:
        return hit[1]
    spec = EndpointSettings.model_validate(stored)
    with _lock:
        _validated[name] = (copy.deepcopy(dict(stored)), spec)
    return spec
