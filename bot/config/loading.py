"""Building :class:`Settings` with every validation error turned into one line naming the setting and a good value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from bot.config.examples import EXAMPLES
from bot.config.settings import Settings
from bot.config.sources import env_name
from bot.config_error import ConfigError


def describe(error: Mapping[str, Any]) -> str:
    """One pydantic error as one line: the variable or file path, what is wrong, and a good value."""
    loc = [str(p) for p in error.get("loc", ())]
    top = loc[0] if loc else "settings"
    field = Settings.model_fields.get(top)
    variable = None
    if field is not None and top not in {"endpoints", "services", "roles"}:
        variable = env_name(Settings, top)
    where = variable or " ".join(["KIMI_CONFIG", *([".".join(loc)] if loc else [])])
    if variable and len(loc) > 1:
        where += f" ({'item ' + str(int(loc[1]) + 1) if loc[1].isdigit() else '.'.join(loc[1:])})"
    msg = error.get("msg", "invalid value").removeprefix("Value error, ")
    example = EXAMPLES.get(top)
    return f"{where}: {msg}" + (f"; e.g. {example}" if example else "")


def load_settings(**overrides: Any) -> Settings:
    """Build :class:`Settings`, turning validation errors into one-line :class:`ConfigError`."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        errors = exc.errors()
        first = describe(errors[0])
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise ConfigError(first + more) from None
