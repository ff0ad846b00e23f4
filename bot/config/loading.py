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
    kind, given = str(error.get("type", "")), error.get("input")
    if kind in NUMBER_WORDS:  # pydantic's "Input should be a valid integer, unable to parse string as an integer"
        msg = f"{str(given)[:40]!r} is not {NUMBER_WORDS[kind]}"
    elif kind in BOUND_WORDS:
        msg = f"{given} is too {BOUND_WORDS[kind][0]}: it must be {BOUND_WORDS[kind][1]} {_bound(error)}"
    example = EXAMPLES.get(top) or (_default_example(variable, field.default) if variable and field is not None else None)
    return f"{where}: {msg}" + (f"; e.g. {example}" if example else "")


NUMBER_WORDS = {"int_parsing": "a whole number", "int_type": "a whole number", "int_from_float": "a whole number",
                "float_parsing": "a number", "float_type": "a number"}
BOUND_WORDS = {"greater_than_equal": ("small", "at least"), "greater_than": ("small", "more than"),
               "less_than_equal": ("large", "at most"), "less_than": ("large", "less than")}


def _bound(error: Mapping[str, Any]) -> str:
    value = next(iter((error.get("ctx") or {}).values()), "")
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _default_example(variable: str, default: Any) -> str | None:
    """A number setting without an example of its own shows its default as one (``KIMI_DB_POOL_SIZE=10``)."""
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        return None
    return f"{variable}={default:g}" if isinstance(default, float) else f"{variable}={default}"


def load_settings(**overrides: Any) -> Settings:
    """Build :class:`Settings`, turning validation errors into one-line :class:`ConfigError`."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        errors = exc.errors()
        first = describe(errors[0])
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise ConfigError(first + more) from None
