"""Writes the generated parts of the docs from the code: the settings models, the Typer commands, the /kimi commands.

A page holds hand-written text and generated regions between two markers::

    <!-- BEGIN GENERATED: NAME (./dev docs) -->
    …
    <!-- END GENERATED: NAME -->

``./dev docs`` (``python docs/gen.py``) rewrites every region; ``python docs/gen.py --check`` changes nothing and
exits 1 naming each stale page. ``tests/project/test_docs.py`` runs the check, so a setting, option or sub-command
added without ``./dev docs`` fails the suite.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, UnionType
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import AliasChoices, BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

DOCS = Path(__file__).resolve().parent
REGION = re.compile(r"(<!-- BEGIN GENERATED: (?P<name>[\w-]+) \(\./dev docs\) -->\n)(?P<body>.*?)"
                    r"(<!-- END GENERATED: (?P=name) -->)", re.DOTALL)


def _cell(text: str) -> str:
    """``text`` fit for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


# --- settings ----------------------------------------------------------------------------------------------


def _plain(annotation: Any) -> Any:
    """The annotation without ``Annotated`` metadata."""
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``X``, ``list[X]``, ``X | None``, ``list[str | X]``)."""
    annotation = _plain(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _type_name(annotation: Any) -> str:
    annotation = _plain(annotation)
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{v}`" for v in typing.get_args(annotation))
    if origin in (UnionType, typing.Union):
        names = [_type_name(a) for a in typing.get_args(annotation) if a is not type(None)]
        return " or ".join(names)
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return f"list of {_type_name(item)}"
    if origin is tuple:
        items = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return "list of " + " or ".join(_type_name(a) for a in items)
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return f"[{_section_title(annotation)}](#{_anchor(annotation)})"
        if issubclass(annotation, enum.Enum):
            return " \\| ".join(f"`{m.value}`" for m in annotation)
        return {"str": "text", "int": "integer", "float": "number", "bool": "boolean", "Path": "path"}.get(
            annotation.__name__, annotation.__name__)
    return str(annotation)


def _bounds(field: FieldInfo) -> str:
    """The field's numeric and length bounds in words (``1–200``, ``> 0``)."""
    low = high = None
    words: list[str] = []
    for item in field.metadata:
        if isinstance(item, annotated_types.Ge):
            low = f"{item.ge}"
        elif isinstance(item, annotated_types.Gt):
            words.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Le):
            high = f"{item.le}"
        elif isinstance(item, annotated_types.Lt):
            words.append(f"< {item.lt}")
    if low is not None and high is not None:
        words.insert(0, f"{low}–{high}")
    elif low is not None:
        words.insert(0, f"≥ {low}")
    elif high is not None:
        words.append(f"≤ {high}")
    return ", ".join(words)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        return "see its fields"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Path):
        return f"`{value}`"
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, list) and all(isinstance(v, int | float | str) for v in value):
        return "`" + ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) + "`" if value else "empty"
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{json.dumps(value) if isinstance(value, list | dict) else value}`"


def _section_title(model: type[BaseModel]) -> str:
    return model.__name__


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def _docstring(model: type[BaseModel]) -> str:
    """The model's docstring as Markdown: its paragraphs and ``*`` lists kept, reST's double backticks made single."""
    blocks: list[str] = []
    for block in inspect.cleandoc(model.__doc__ or "").replace("``", "`").split("\n\n"):
        items: list[str] = []
        for line in block.splitlines():
            if line.lstrip().startswith(("* ", "- ")) or not items:
                items.append(line.strip())
            else:
                items[-1] += " " + line.strip()
        lead = [i for i in items if not i.startswith(("* ", "- "))]
        bullets = ["- " + " ".join(i[2:].split()) for i in items if i.startswith(("* ", "- "))]
        if lead:
            blocks.append(" ".join(" ".join(lead).split()))
        if bullets:
            blocks.append("\n".join(bullets))
    return "\n\n".join(b for b in blocks if b)


def env_name(name: str, field: FieldInfo) -> str:
    """The environment variable a top-level setting is read from."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return str(alias.choices[0])
    return f"KIMI_{name.upper()}"


def _field_rows(model: type[BaseModel]) -> Iterator[str]:
    for name, field in model.model_fields.items():
        kind = _type_name(field.annotation)
        bounds = _bounds(field)
        yield (f"| `{name}` | {kind}{', ' + bounds if bounds else ''} | {_default(field)} | "
               f"{_cell(field.description or '')} |")


def settings_reference() -> str:
    """Every setting: the environment variables, then each model the ``KIMI_CONFIG`` file's sections take."""
    from bot.config import Settings

    lines = ["| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
    found: list[tuple[str, type[BaseModel]]] = []
    for name, field in Settings.model_fields.items():
        kind = _type_name(field.annotation)
        bounds = _bounds(field)
        lines.append(f"| `{env_name(name, field)}` | {kind}{', ' + bounds if bounds else ''} | {_default(field)} | "
                     f"{_cell(field.description or '')} |")
        found += [(name + ("[]" if typing.get_origin(_plain(field.annotation)) is list else ""), m)
                  for m in _models_in(field.annotation)]
    seen: dict[type[BaseModel], str] = {}
    while found:  # breadth first: each model under the first place the file names it
        where, model = found.pop(0)
        if model in seen:
            continue
        seen[model] = where
        for name, field in model.model_fields.items():
            inner = name + ("[]" if typing.get_origin(_plain(field.annotation)) is list else "")
            found += [(f"{where}.{inner}", m) for m in _models_in(field.annotation)]
    for model, where in seen.items():
        lines += ["", f'<a id="{_anchor(model)}"></a>', "", f"### `{where}` ({_section_title(model)})", ""]
        if _docstring(model):
            lines += [_docstring(model), ""]
        lines += ["| field | type | default | meaning |", "| --- | --- | --- | --- |", *_field_rows(model)]
    return "\n".join(lines) + "\n"


# --- the kimi-ops command line ------------------------------------------------------------------------------


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path, command
        return
    if path:
        yield path, command
    for name in sorted(subcommands):
        if not subcommands[name].hidden:
            yield from _commands(subcommands[name], [*path, name])


def cli_reference() -> str:
    """Every ``kimi-ops`` command: its usage line, what it does, its arguments and options."""
    import typer.main

    from bot.cli.main import app

    root = typer.main.get_command(app)
    lines: list[str] = []
    for path, command in _commands(root, []):
        parent = root.make_context("kimi-ops", [], resilient_parsing=True)
        ctx = command.make_context(" ".join(path), [], parent=parent, resilient_parsing=True)
        usage = " ".join(["kimi-ops", *path, *command.collect_usage_pieces(ctx)])
        help_text = " ".join((command.help or "").split("\b")[0].split())
        lines += [f"### `kimi-ops {' '.join(path)}`", "", f"`{usage}`", ""]
        if help_text:
            lines += [help_text, ""]
        rows = []
        for param in command.get_params(ctx):
            if getattr(param, "hidden", False) or param.name == "help":
                continue
            if param.param_type_name == "argument":
                name = str(param.metavar or param.name.upper())
            else:
                name = ", ".join(sorted(param.opts, key=len, reverse=True))
                if not param.is_flag:
                    name += f" {param.metavar or param.name.upper()}"
            default = ""
            if param.param_type_name == "option" and not param.is_flag and param.default not in (None, "", ()) \
                    and param.show_default is not False:
                value = param.default.value if isinstance(param.default, enum.Enum) else param.default
                default = f" (default: `{value}`)"
            elif param.required:
                default = " (required)"
            rows.append(f"| `{_cell(name)}` | {_cell(getattr(param, 'help', None) or '')}{default} |")
        if rows:
            lines += ["| argument or option | meaning |", "| --- | --- |", *rows, ""]
    return "\n".join(lines)


# --- /kimi ----------------------------------------------------------------------------------------------


def slack_commands() -> str:
    """The ``/kimi`` sub-commands, in ``/kimi help`` order, with their usage and help lines."""
    from commands.registry import COMMANDS

    module: ModuleType
    lines = ["| usage | what it does |", "| --- | --- |"]
    for module in COMMANDS:
        lines.append(f"| `{_cell(module.USAGE)}` | {_cell(module.HELP)} |")
    return "\n".join(lines) + "\n"


REGIONS: dict[str, Callable[[], str]] = {
    "settings": settings_reference,
    "cli-commands": cli_reference,
    "slack-commands": slack_commands,
}


def render(text: str) -> str:
    """``text`` with every generated region rewritten; an unknown region name is an error."""
    def fill(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in REGIONS:
            raise SystemExit(f"docs: unknown generated region {name!r}; known: {', '.join(REGIONS)}")
        return match.group(1) + REGIONS[name]() + match.group(4)

    return REGION.sub(fill, text)


def stale_pages() -> dict[Path, str]:
    """Each page whose generated regions differ from what the code gives now, with its new text."""
    stale: dict[Path, str] = {}
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        new = render(text)
        if new != text:
            stale[page] = new
    return stale


def main(argv: list[str]) -> int:
    stale = stale_pages()
    if "--check" in argv:
        for page in stale:
            print(f"{page.relative_to(DOCS.parent)} is stale: run ./dev docs", file=sys.stderr)
        return 1 if stale else 0
    for page, text in stale.items():
        page.write_text(text)
        print(f"wrote {page.relative_to(DOCS.parent)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(DOCS.parent))
    sys.exit(main(sys.argv[1:]))
