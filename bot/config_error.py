"""The error a bad setting raises, apart from :mod:`bot.config` so that catching it loads no pydantic.

``kimi-ops --help`` catches it around every command but reads no settings; :mod:`bot.config` re-exports it.
"""

from __future__ import annotations


class ConfigError(Exception):
    """A setting is missing or wrong; the message is one line fit for a user."""
