"""Terminal output helpers for the CLI (tables via rich, errors on stderr).

``stdout`` and ``stderr`` are rich consoles made on first use (module ``__getattr__``), so a command that
prints nothing through them (``kimi-ops --help``) does not load rich's console and tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    stdout: Console
    stderr: Console


@cache
def _console(err: bool) -> Console:
    from rich.console import Console

    return Console(stderr=err, highlight=False, soft_wrap=True)


def __getattr__(name: str) -> Any:
    if name in ("stdout", "stderr"):
        return _console(name == "stderr")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def error(message: str) -> None:
    _console(True).print(f"error: {message}" if not message.startswith("  ") else message, markup=False)


def warn(message: str) -> None:
    _console(True).print(f"warning: {message}", markup=False)


def info(message: str) -> None:
    _console(False).print(message, markup=False)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[object]], empty: str = "(none)") -> None:
    from rich.table import Table

    rows = list(rows)
    if not rows:
        _console(False).print(f"{title + ': ' if title else ''}{empty}", markup=False)
        return
    t = Table(title=title, show_lines=False, title_justify="left")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    _console(False).print(t)
