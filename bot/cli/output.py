"""Terminal output helpers for the CLI: tables, ``-o json|yaml`` documents, errors on stderr.

``stdout`` and ``stderr`` are rich consoles made on first use (module ``__getattr__``), so a command that
prints nothing through them (``kimi-ops --help``) does not load rich's console and tables.
On a terminal a table is drawn by rich; piped or redirected it is plain aligned
columns, one row per line and never wrapped (``kimi-ops history | grep …``
keeps each value whole), as kubectl prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from bot.cli.conventions import Format, plain
from bot.domain.chat_text import unmarked
from bot.views.commands import for_terminal

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


# Sentences from the services name commands as Slack spells them; a terminal shows its own spelling.
def error(message: str) -> None:
    message = for_terminal(message)
    _console(True).print(f"error: {message}" if not message.startswith("  ") else message, markup=False)


def warn(message: str) -> None:
    _console(True).print(f"warning: {for_terminal(message)}", markup=False)


def info(message: str) -> None:
    _console(False).print(for_terminal(message), markup=False)


def _cell(value: object) -> str:
    return "" if value is None else " ".join(unmarked(str(value)).split("\n"))


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Aligned columns, two spaces apart, headers in capitals (kubectl's shape); the last column is not padded."""
    header = [c.upper() for c in columns]
    cells = [header, *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[object]], empty: str = "(none)") -> None:
    out = _console(False)
    rows = list(rows)
    if not rows:
        out.print(f"{title + ': ' if title else ''}{empty}", markup=False)
        return
    if not out.is_terminal:
        if title:
            out.print(f"{title}:", markup=False)
        for line in plain_table(columns, rows):
            out.out(line, highlight=False)
        return
    from rich.table import Table

    t = Table(title=title, show_lines=False, title_justify="left")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*(_cell(v) for v in row))
    out.print(t)


def document(data: Any, fmt: Format) -> None:
    """``data`` as JSON or YAML on stdout (plain keys, ISO 8601 times), nothing else on stdout."""
    ready = plain(data)
    if fmt is Format.JSON:
        _console(False).out(json.dumps(ready, indent=2, ensure_ascii=False), highlight=False)
    else:
        import yaml

        _console(False).out(yaml.safe_dump(ready, sort_keys=False, allow_unicode=True).rstrip("\n"), highlight=False)


def emit(fmt: Format, data: Any, show_table: Callable[[], None]) -> None:
    """A read command's answer: ``show_table()`` for people, else ``data`` as the document asked for."""
    if fmt is Format.TABLE:
        show_table()
    else:
        document(data, fmt)
