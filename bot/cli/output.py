"""Terminal output helpers for the CLI (tables via rich, errors on stderr)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.table import Table

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def error(message: str) -> None:
    stderr.print(f"error: {message}" if not message.startswith("  ") else message, markup=False)


def warn(message: str) -> None:
    stderr.print(f"warning: {message}", markup=False)


def info(message: str) -> None:
    stdout.print(message, markup=False)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[object]], empty: str = "(none)") -> None:
    rows = list(rows)
    if not rows:
        stdout.print(f"{title + ': ' if title else ''}{empty}", markup=False)
        return
    t = Table(title=title, show_lines=False, title_justify="left")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    stdout.print(t)
