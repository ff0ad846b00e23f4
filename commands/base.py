"""What every ``/kimi`` sub-command module shares: the usage error and argument helpers.

A sub-command module declares ``NAME``, ``USAGE`` (one line), ``HELP`` (one
sentence), ``parse(args)`` (pure: raises :class:`Usage` on malformed input, so the
app can answer before doing any work) and ``run(root, identity, parsed) -> Reply``, where
``root`` is the process's :class:`bot.bootstrap.Root` (its Context and its one engine) and
``parsed`` is what ``parse`` returned: the app parses once, when it acknowledges.
"""

from __future__ import annotations


class Usage(Exception):
    """Malformed input: what is wrong (``problem``, naming the word at fault) and the sub-command's usage line."""

    def __init__(self, usage: str, problem: str | None = None) -> None:
        self.usage, self.problem = usage, problem
        # A problem that ends its own sentence ("… did you mean `status`?") is not given a second full stop.
        ends = "" if problem and problem.endswith(("?", ".", "!")) else "."
        super().__init__(f"{problem}{ends} Usage: `{usage}`" if problem else f"Usage: `{usage}`")


# Deployment ids are database integers: a longer number is no deployment, and would overflow the query.
MAX_DEPLOYMENT_DIGITS = 9
LARGEST_NUMBER = 999_999_999  # the largest of nine digits


def storable(number: int) -> bool:
    """Whether ``number`` can name a stored row: a button's value may carry any integer, the database holds few.

    Past the database's integers the query itself would fail (SQLite and psycopg refuse to bind the number), so a
    bigger number is simply no such row.
    """
    return 1 <= number <= LARGEST_NUMBER


def number_words(number: int) -> str:
    """``#5``; a number too long to read back is cut short (``#100000000000…``)."""
    return f"#{number}" if number <= LARGEST_NUMBER else f"#{str(number)[:12]}…"


def q(word: str, limit: int = 40) -> str:
    """``word`` quoted as code for a usage error, cut short: a 2,000-character word is not echoed back whole."""
    return f"`{word if len(word) <= limit else word[:limit] + '…'}`"


def deployment_number(text: str, usage: str) -> int:
    digits = text.removeprefix("#")
    if not (digits.isascii() and digits.isdigit()) or len(digits) > MAX_DEPLOYMENT_DIGITS or int(digits) < 1:
        raise Usage(usage, f"{q(text)} is not a deployment number (say `5` or `#5`)")
    return int(digits)


def extra(words: list[str]) -> str:
    """The words nobody asked for, quoted: ``"`a b` is extra"``."""
    return f"{q(' '.join(words))} {'is' if len(words) == 1 else 'are'} more than this command takes"


def at(when: object) -> str:
    return f"{when:%Y-%m-%d %H:%M} UTC" if when is not None else "-"
