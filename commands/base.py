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


# Deployment ids are database integers: a longer number is no deployment, and would overflow the query.
MAX_DEPLOYMENT_DIGITS = 9


def deployment_number(text: str, usage: str) -> int:
    digits = text.removeprefix("#")
    if not (digits.isascii() and digits.isdigit()) or len(digits) > MAX_DEPLOYMENT_DIGITS or int(digits) < 1:
        raise Usage(usage)
    return int(digits)


def at(when: object) -> str:
    return f"{when:%Y-%m-%d %H:%M} UTC" if when is not None else "-"
