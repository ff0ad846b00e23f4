"""What every ``/kimi`` sub-command module shares: the usage error, argument helpers, the engine.

A sub-command module declares ``NAME``, ``USAGE`` (one line), ``HELP`` (one
sentence), ``parse(args)`` (pure: raises :class:`Usage` on malformed input, so the
app can answer before doing any work) and ``run(ctx, identity, parsed) -> Reply``, where
``parsed`` is what ``parse`` returned: the app parses once, when it acknowledges.
"""

from __future__ import annotations

from bot.bootstrap import Context
from bot.services.engine import Engine

ENGINE_KEY = "engine"


class Usage(Exception):
    """Malformed input: the message is the sub-command's usage line."""


def engine(ctx: Context) -> Engine:
    """The process's deployment engine (one per process, so a rollout watch can be stopped)."""
    found = ctx.adapters.get(ENGINE_KEY)
    if found is None:
        found = ctx.adapters.setdefault(ENGINE_KEY, Engine(ctx))
    return found


def deployment_number(text: str, usage: str) -> int:
    try:
        number = int(text.lstrip("#"))
    except ValueError:
        raise Usage(usage) from None
    if number < 1:
        raise Usage(usage)
    return number


def at(when: object) -> str:
    return f"{when:%Y-%m-%d %H:%M} UTC" if when is not None else "-"
