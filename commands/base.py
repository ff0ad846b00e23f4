"""What every ``/kimi`` sub-command module shares: the usage error and argument helpers.

A sub-command module declares ``NAME``, ``USAGE`` (one line), ``HELP`` (one
sentence), ``parse(args)`` (pure: raises :class:`Usage` on malformed input, so the
app can answer before doing any work) and ``run(root, identity, parsed) -> Reply``, where
``root`` is the process's :class:`bot.bootstrap.Root` (its Context and its one engine) and
``parsed`` is what ``parse`` returned: the app parses once, when it acknowledges.
"""

from __future__ import annotations


class Usage(Exception):
    """Malformed input: the message is the sub-command's usage line."""


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
