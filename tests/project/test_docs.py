"""The docs stay true: generated pages are current, and every path, module and migration a page names exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from tests.docs_support import DESIGN, DOCS, ROOT, pages

# A repository path in code quotes (`bot/slack/work.py`, `deploy/slack/`, `bot/slack/work.Worker`): a word whose
# first part has no dot (so `kimi-ops.io/drill` and `s3://…` are not paths). Paths outside the repository start
# with `../` or `/`. And a module (`bot.services.access.refuse_foreign_request`).
PATH = re.compile(r"^\.?[a-z][a-z0-9_-]*/[\w./-]*$")
MODULE = re.compile(r"^((?:bot|commands|jobs)\.[a-z_][\w.]*)")
MIGRATIONS = re.compile(r"[Mm]igrations?\s+((?:`?\d{4}`?(?:,\s*|\s+and\s+|\s*(?:–|to)\s*)?)+)")
# "`slack_work` (migration 0014" and "the table `slack_posts` (migration 0008": the migration creates that table.
TABLE_MIGRATION = re.compile(r"`(\w+)`\s*\(migration\s+`?(\d{4})")


def _documents() -> list[Path]:
    return [DESIGN, *pages()]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_gen", DOCS / "gen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _exists(name: str) -> bool:
    """Whether a named path exists, read as a file, a folder, or a module path followed by ``.attribute``s."""
    if (ROOT / name).exists():
        return True
    if re.search(r"\.(py|ya?ml|json|md|txt|toml|ini|cfg|sh|png)$", name):
        return False  # a file named with its extension must be that file
    head, _, tail = name.rpartition("/")
    parts = tail.split(".")
    for cut in range(len(parts), 0, -1):
        base = "/".join(filter(None, [head, ".".join(parts[:cut])]))
        if (ROOT / f"{base}.py").exists() or (ROOT / base).is_dir():
            return True
    return False


def _module_exists(dotted: str) -> bool:
    """Whether ``bot.x.y.name`` is a module (or a package), perhaps followed by the names it holds."""
    parts = dotted.split(".")
    return any(_exists("/".join(parts[:cut])) for cut in range(len(parts), 0, -1)
               if (ROOT / ("/".join(parts[:cut]) + ".py")).exists() or (ROOT / "/".join(parts[:cut])).is_dir())


def _migration(number: str) -> Path | None:
    return next(iter(sorted((ROOT / "migrations" / "versions").glob(f"{number}_*.py"))), None)


def test_generated_pages_are_current() -> None:
    stale = _generator().stale_pages()
    assert not stale, f"stale generated pages (run ./dev docs): {', '.join(str(p.relative_to(ROOT)) for p in stale)}"


def test_every_path_and_module_the_docs_name_exists() -> None:
    missing = []
    for document in _documents():
        for span in re.findall(r"`([^`\n]+)`", document.read_text()):
            for word in span.split():
                word = word.rstrip(".,:;)")
                if PATH.match(word) and not any(c in word for c in "<*…{") and not _exists(word):
                    missing.append(f"{document.name}: {word}")
                module = MODULE.match(word)
                if module and not _module_exists(module.group(1)):
                    missing.append(f"{document.name}: {word}")
    for document in _documents():  # and the repository paths in the commands of shell blocks
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", document.read_text(), flags=re.S):
            for word in re.findall(r"(?<![\w/.-])((?:bot|commands|jobs|migrations|deploy|bench|docs|tests|\.ci)/[\w./-]+)",
                                   block):
                if not any(c in word for c in "<*…{") and not _exists(word.rstrip(".")):
                    missing.append(f"{document.name}: {word}")
    assert not missing, "named but not in the repository:\n" + "\n".join(missing)


def test_every_migration_the_docs_name_exists_and_makes_what_they_say() -> None:
    named = 0
    for document in _documents():
        text = document.read_text()
        for group in MIGRATIONS.findall(text):
            for number in re.findall(r"\d{4}", group):
                named += 1
                assert _migration(number) is not None, f"{document.name} names migration {number}, which does not exist"
        for table, number in TABLE_MIGRATION.findall(text):
            migration = _migration(number)
            assert migration is not None and table in migration.read_text(), \
                f"{document.name}: `{table}` is not made by migration {number}"
    assert named >= 5


def test_every_setting_the_docs_name_is_a_setting() -> None:
    from bot.config import Settings

    gen = _generator()
    known = {gen.env_name(name, field) for name, field in Settings.model_fields.items()}
    for document in _documents():
        named = set(re.findall(r"\b(?:KIMI|SLACK)_[A-Z_]*[A-Z]\b", document.read_text()))
        assert named <= known, f"{document.name} names settings that do not exist: {', '.join(sorted(named - known))}"


def test_the_performance_page_names_every_benchmark() -> None:
    page = (DOCS / "performance.md").read_text()
    missing = [b.name for b in sorted((ROOT / "bench").glob("*.py")) if f"bench/{b.name}" not in page]
    assert not missing, f"docs/performance.md does not say how to run: {', '.join(missing)}"


def test_the_cli_page_lists_the_exit_codes_the_cli_uses() -> None:
    from bot.cli import conventions

    page = (DOCS / "cli.md").read_text()
    listed = {int(code) for code in re.findall(r"^\| (\d+) \|", page, flags=re.M)}
    used = {value for name, value in vars(conventions).items() if name.startswith("EXIT_") and isinstance(value, int)}
    assert listed == used


def test_the_design_is_short_enough_to_read() -> None:
    assert len(DESIGN.read_text().splitlines()) <= 400


def test_every_design_section_the_code_points_to_exists() -> None:
    text = DESIGN.read_text()
    titles = [t.lower() for t in re.findall(r"^#+ (.+)$|^\*\*([^*]+)\.\*\*", text, flags=re.M) for t in t if t]
    for folder in ("bot", "commands", "jobs", "bench"):
        for module in (ROOT / folder).rglob("*.py"):
            for section in re.findall(r'DESIGN\.md,\s+"([^"]+)"', module.read_text()):
                assert any(section.lower() in title for title in titles), \
                    f"{module.relative_to(ROOT)} points to DESIGN.md's \"{section}\", which has no such section"


def test_the_slack_page_names_every_button() -> None:
    listed = set(re.findall(r"\*\*([^*]+)\*\*", (DOCS / "slack.md").read_text().split("## Buttons", 1)[1]))
    labels = set()
    for folder in ("bot/views", "commands"):
        for module in (ROOT / folder).rglob("*.py"):
            # The words of each label the code builds, up to its first placeholder: "Next: {shown}" is "Next".
            labels |= {re.split(r"[:{(]", label)[0].strip() for label in re.findall(r'Button\(f?"([^"]+)"', module.read_text())}
    assert len(labels) >= 10
    missing = {label for label in labels if not any(item.startswith(label) for item in listed)}
    assert not missing, f"docs/slack.md's Buttons table misses: {', '.join(sorted(missing))}"


def test_every_link_between_pages_resolves() -> None:
    for document in _documents():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", document.read_text()):
            if "://" in target:
                continue
            assert (document.parent / target).exists(), f"{document.name} links {target}, which does not exist"


def test_every_setting_and_field_says_what_it_means() -> None:
    # A field without a description would be a blank cell in the generated reference.
    rows = [row for row in (DOCS / "configuration.md").read_text().splitlines() if row.startswith("| `")]
    assert len(rows) > 80
    blank = [row.split(" | ")[0] for row in rows if row.rstrip().endswith("|  |")]
    assert not blank, f"add a description= to these settings' fields: {', '.join(blank)}"
