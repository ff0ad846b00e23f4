"""The CLI's kubectl/helm conventions: plain help, ``-o table|json|yaml``, and the documented exit codes.

Every ``kimi-ops`` Typer app is made by :func:`typer_app`, whose commands print
plain help in the shape kubectl and helm use (``Usage: kimi-ops cancel
[OPTIONS] DEPLOYMENT``, an option's value named ``--as USER``), never Rich's
panels with ``<bool>`` or ``{deployment}`` in them. Exit codes are the same for
every command; ``kimi-ops --help`` lists them.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any

import typer
from typer.core import TyperCommand

from bot.domain.chat_text import unmarked

# What a script may rely on (docs/cli.md lists the same; a test compares them).
EXIT_DONE = 0
EXIT_REFUSED = 1  # refused, not found, a check failed, a gate blocked, the deployment ended without going live
EXIT_USAGE = 2  # the command line or a setting is wrong
EXIT_SCHEMA = 3  # the database schema is behind this kimi-ops (`kimi-ops db upgrade`)
EXIT_BUG = 70  # an unexpected error: the log has it under the correlation id printed

EXIT_CODES_HELP = (
    "Exit codes: 0 done; 1 refused, not found, a check failed or a deployment ended without going live; "
    "2 usage or a bad setting; 3 the database schema is behind (run kimi-ops db upgrade); "
    "70 an unexpected error (the log has it under the correlation id printed)."
)


class Format(enum.StrEnum):
    """What ``-o`` takes on every read command: a table for people, JSON or YAML with stable keys for scripts."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


OUTPUT_OPTION: Any = typer.Option(Format.TABLE, "--output", "-o", case_sensitive=False, metavar="table|json|yaml",
                                   help="table for people; json or yaml (stable keys) for scripts.")


def _metavar(param: Any) -> str:
    return str(param.metavar or (param.name or "value").upper())


# Typer (0.2x) carries its own copy of click, so parameters are told apart by the kind click names them with.
class PlainCommand(TyperCommand):
    """Help as kubectl prints it: ``ARGUMENT`` and ``[ARGUMENT]`` in the usage line, ``--option VALUE`` below."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = _metavar(param) + ("..." if param.nargs != 1 else "")
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        options: list[tuple[str, str]] = []
        param: Any
        for param in self.get_params(ctx):
            help_text = getattr(param, "help", None) or ""
            if param.param_type_name == "argument":
                arguments.append((_metavar(param), help_text))
            elif param.param_type_name == "option" and not param.hidden:
                names = ", ".join(sorted(param.opts, key=len, reverse=True))
                if param.secondary_opts:  # an on/off pair (--jobs/--no-jobs): both spellings, the default said
                    names += " / " + ", ".join(param.secondary_opts)
                    help_text += f" (default: {param.opts[0] if param.default else param.secondary_opts[0]})"
                if not param.is_flag:
                    names += f" {_metavar(param)}"
                extra = ""
                if param.required:
                    extra = " (required)"
                elif not param.is_flag and param.default not in (None, "") and param.show_default is not False:
                    default = param.default.value if isinstance(param.default, enum.Enum) else param.default
                    extra = f" (default: {default})"
                options.append((names, help_text + extra))
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        if options:
            with formatter.section("Options"):
                formatter.write_dl(options)


class PlainTyper(typer.Typer):
    """A Typer app whose commands print :class:`PlainCommand` help."""

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None,  # type: ignore[override]
                **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return super().command(name, cls=cls or PlainCommand, **kwargs)


def typer_app(**kwargs: Any) -> PlainTyper:
    """A command group; only the root app asks for shell completion (``add_completion=True``)."""
    kwargs.setdefault("add_completion", False)
    return PlainTyper(rich_markup_mode=None, no_args_is_help=True, pretty_exceptions_enable=False, **kwargs)


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses and pydantic models by field name, times in ISO 8601 UTC."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, dt.date):
        return value.isoformat()
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if hasattr(value, "model_dump"):
        return plain(value.model_dump(mode="json"))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [plain(v) for v in value]
        return sorted(items) if isinstance(value, set | frozenset) else items
    if isinstance(value, str):
        return unmarked(value)  # a typed id's invisible mark is for Slack, not for a document
    return value
