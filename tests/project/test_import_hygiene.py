"""The import rules the linters do not check: no private name crosses a module, no import cycle, one logger tree.

Function-local imports count (grimp reads every import statement, wherever it stands): a cycle closed only by
importing inside a function is still a cycle.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Iterator
from pathlib import Path

import grimp

from bot.logs import ROOT_LOGGER, logger_for, logger_name

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "commands", "jobs")
def _sources() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            yield module, ast.parse(path.read_text(), filename=str(path))


def private_imports() -> list[str]:
    """``module: from other import _name`` for every first-party private name imported from another module."""
    found = []
    for module, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] in PACKAGES:
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{module}:{node.lineno}: from {node.module} import {alias.name}")
    return found


def import_cycles() -> list[list[str]]:
    """Every group of first-party modules that import each other, directly or round a loop (Tarjan's algorithm)."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & set(modules)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in modules:
        if start in index:
            continue
        # Iterative depth-first search: a recursive one would run out of frames on a long chain of imports.
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return cycles


def test_no_private_name_is_imported_from_another_module() -> None:
    assert private_imports() == [], "make the name public where it is defined (or move it to where it is used)"


def test_no_import_cycle_even_through_function_local_imports() -> None:
    assert import_cycles() == [], "these modules import each other"


def test_the_cycle_finder_finds_a_cycle_closed_inside_a_function(tmp_path: Path, monkeypatch) -> None:
    """The rule above can fail: a two-module package whose loop closes in a function body is reported."""
    package = tmp_path / "loop_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "first.py").write_text("from loop_pkg import second\n")
    (package / "second.py").write_text("def later():\n    from loop_pkg import first\n    return first\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(f"{__name__}.PACKAGES", ("loop_pkg",))
    assert import_cycles() == [["loop_pkg.first", "loop_pkg.second"]]


def _module_loggers() -> list[str]:
    """``module:line`` of every ``logging.getLogger(__name__)`` or ``logging.getLogger("kimi_ops…")`` outside bot/logs."""
    found = []
    for module, tree in _sources():
        if module == "bot.logs":
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "getLogger"
                    and node.args):
                arg = node.args[0]
                ours = (isinstance(arg, ast.Name) and arg.id == "__name__") or (
                    isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                    and arg.value.split(".")[0] in {ROOT_LOGGER, *PACKAGES})
                if ours:
                    found.append(f"{module}:{node.lineno}")
    return found


def test_every_module_logs_in_the_one_kimi_ops_hierarchy() -> None:
    assert _module_loggers() == [], (
        "use log = logger_for(__name__) (bot.logs)"
    )
    assert logger_name("bot.services.gates") == "kimi_ops.services.gates"
    assert logger_name("bot.slack.middleware.origin") == "kimi_ops.slack.middleware.origin"
    assert logger_name("commands.deploy") == "kimi_ops.commands.deploy"


def test_one_level_on_the_kimi_ops_logger_governs_every_layer(caplog) -> None:
    """An operator turning ``kimi_ops`` (or ``kimi_ops.slack``) down hears nothing more from the modules below it."""
    caplog.set_level(logging.INFO)
    logging.getLogger(ROOT_LOGGER).setLevel(logging.ERROR)
    try:
        logger_for("bot.adapters.cluster.observe").warning("the API server did not answer")
        logger_for("bot.slack.listeners.commands").error("a listener failed")
    finally:
        logging.getLogger(ROOT_LOGGER).setLevel(logging.NOTSET)
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("kimi_ops.slack.listeners.commands", "a listener failed")]
