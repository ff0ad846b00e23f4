"""Terminal output helpers for the CLI: tables, ``-o json|yaml`` documents, errors on stderr.

On a terminal a table is drawn by rich; piped or redirected it is plain aligned
columns, one row per line and never wrapped (``kimi-ops history | grep …``
keeps each value whole), as kubectl prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from bot.cli.conventions import Format, plain
from bot.views.commands import for_terminal

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


# Sentences from the services name commands as Slack spells them; a terminal shows its own spelling.
def error(message: str) -> None:
    message = for_terminal(message)
    stderr.print(f"error: {message}" if not message.startswith("  ") else message, markup=False)


def warn(message: str) -> None:
    stderr.print(f"warning: {for_terminal(message)}", markup=False)


def info(message: str) -> None:
    stdout.print(for_terminal(message), markup=False)


def _cell(value: object) -> str:
    return "" if value is None else " ".join(str(value).split("\n"))


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Aligned columns, two spaces apart, headers in capitals (kubectl's shape); the last column is not padded."""
    header = [c.upper() for c in columns]
    cells = [header, *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[object]], empty: str = "(none)") -> None:
    rows = list(rows)
    if not rows:
        stdout.print(f"{title + ': ' if title else ''}{empty}", markup=False)
        return
    if not stdout.is_terminal:
        if title:
            stdout.print(f"{title}:", markup=False)
        for line in plain_table(columns, rows):
            stdout.out(line, highlight=False)
        return
    t = Table(title=title, show_lines=False, title_justify="left")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*(_cell(v) for v in row))
    stdout.print(t)


def document(data: Any, fmt: Format) -> None:
    """``data`` as JSON or YAML on stdout (plain keys, ISO 8601 times), nothing else on stdout."""
    ready = plain(data)
    if fmt is Format.JSON:
        stdout.out(json.dumps(ready, indent=2, ensure_ascii=False), highlight=False)
    else:
        import yaml

        stdout.out(yaml.safe_dump(ready, sort_keys=False, allow_unicode=True).rstrip("\n"), highlight=False)


def emit(fmt: Format, data: Any, show_table: Callable[[], None]) -> None:
    """A read command's answer: ``show_table()`` for people, else ``data`` as the document asked for."""
    if fmt is Format.TABLE:
        show_table()
    else:
        document(data, fmt)
