"""Names people type for releases, endpoints and sub-commands: any case, and a "did you mean" when one is close.

Pure: the services hand the known names in and raise their own error with the
sentence :func:`unknown` gives.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def match(typed: str, known: Iterable[str]) -> str | None:
    """The known name ``typed`` means: itself, else the one it equals ignoring case (when only one does)."""
    names = list(known)
    if typed in names:
        return typed
    same = [n for n in names if n.casefold() == typed.casefold()]
    return same[0] if len(same) == 1 else None


def suggestions(typed: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Known names close to ``typed`` (case ignored), closest first."""
    by_folded: dict[str, str] = {}
    for name in known:
        by_folded.setdefault(name.casefold(), name)
    close = difflib.get_close_matches(typed.casefold(), list(by_folded), n=n, cutoff=0.6)
    return [by_folded[c] for c in close]


def did_you_mean(typed: str, known: Iterable[str]) -> str:
    """``"; did you mean `a` or `b`?"`` when some known name is close, else ``""``."""
    close = suggestions(typed, known)
    if not close:
        return ""
    quoted = [f"`{c}`" for c in close]
    return "; did you mean " + (quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]) + "?"
