"""Reading YAML that people hand us (release manifests, serving files, KIMI_CONFIG, evaluation sets) safely.

``yaml.safe_load`` builds no arbitrary objects, but it still reads a file of
any size, follows any number of aliases (a "billion laughs" bomb is a few
hundred bytes that expands to billions of nodes as soon as anything walks it)
and nests without bound. :func:`load_yaml_file` and :func:`load_yaml_text`
add the limits, and turn every way a file can be wrong — missing, a
directory, unreadable, binary, not UTF-8, not YAML, too big — into one
:class:`YamlFileError` whose message is a single line naming the file, for
the caller to show as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEFAULT_MAX_BYTES = 1024 * 1024
DEFAULT_MAX_ALIASES = 1000
# What the document would be with every alias written out: a bomb is small until it is expanded.
MAX_EXPANDED_NODES = 2_000_000
MAX_DEPTH = 64


class YamlFileError(ValueError):
    """A YAML file or text that cannot be taken; ``str()`` is one line for a person."""


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader that refuses too many aliases and too deep a nesting while composing."""

    max_aliases = DEFAULT_MAX_ALIASES

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > self.max_aliases:
                raise YamlFileError(f"uses more than {self.max_aliases} aliases (&/*), which is refused as a YAML bomb")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlFileError(f"nests deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml_text(text: str, source: str, max_aliases: int = DEFAULT_MAX_ALIASES) -> Any:
    """Parse ``text`` (already size-checked) with the alias and depth limits; errors name ``source``."""
    if "\x00" in text:
        raise YamlFileError(f"{source}: is a binary file (it contains NUL bytes), not YAML")
    loader = _LimitedLoader(text)
    loader.max_aliases = max_aliases
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_EXPANDED_NODES:
            raise YamlFileError(f"expands to more than {MAX_EXPANDED_NODES:,} values through its aliases, "
                                "which is refused as a YAML bomb")
        return loader.construct_document(node)
    except YamlFileError as exc:
        raise YamlFileError(f"{source}: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise YamlFileError(f"{source}: not valid YAML{where} ({exc.problem or 'syntax error'})") from None
    except yaml.YAMLError:
        raise YamlFileError(f"{source}: not valid YAML") from None
    except RecursionError:
        raise YamlFileError(f"{source}: nests too deeply to read") from None
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Values in the document once aliases are written out; each distinct node is visited once."""
    known = memo.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    memo[id(node)] = min(size, MAX_EXPANDED_NODES + 1)
    return memo[id(node)]


def read_text_file(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The UTF-8 text of ``path``, at most ``max_bytes``; every failure is one line naming the file."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise YamlFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise YamlFileError(f"{path}: is a directory, not a file") from None
    except PermissionError:
        raise YamlFileError(f"{path}: cannot be read (permission denied)") from None
    except OSError as exc:
        raise YamlFileError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > max_bytes:
        raise YamlFileError(f"{path}: larger than {max_bytes:,} bytes, which is refused")
    if b"\x00" in raw:
        raise YamlFileError(f"{path}: is a binary file (it contains NUL bytes), not YAML")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlFileError(f"{path}: is not UTF-8 text (byte {exc.start} cannot be decoded)") from None


def load_yaml_file(path: Path, max_bytes: int = DEFAULT_MAX_BYTES, max_aliases: int = DEFAULT_MAX_ALIASES) -> Any:
    """Read and parse a YAML file within the size, alias and depth limits."""
    return load_yaml_text(read_text_file(path, max_bytes), str(path), max_aliases)
