"""The terminal examples of the README and the docs pages, read from their code blocks, so tests can hold them to what ships."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DESIGN = ROOT / "DESIGN.md"
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """The README and every page under docs/, where the examples are."""
    return [README, *sorted(DOCS.glob("*.md"))]


_BLOCK = re.compile(r"```(?:bash|text)\n(.*?)```", re.DOTALL)


def command_lines() -> list[list[str]]:
    """Every ``kimi-ops …`` line of the pages' bash and text blocks as words (comments and prompts dropped)."""
    found: list[list[str]] = []
    for block in (b for page in pages() for b in _BLOCK.findall(page.read_text())):
        for line in block.splitlines():
            line = re.sub(r"^\$ |^\./dev run ", "", line.strip())
            if not line.startswith("kimi-ops "):
                continue
            line = line.split("  #")[0].split(" # ")[0].split(" | ")[0].rstrip(" \\&")
            words = shlex.split(line.replace("[", "").replace("]", "").replace("…", "x"))
            found.append(words[1:])
    return found


def text_block_after(prompt: str) -> str:
    """The output a page shows under ``$ PROMPT`` in a text block."""
    text = next(t for t in (p.read_text() for p in pages()) if f"$ {prompt}\n" in t)
    start = text.index(f"$ {prompt}\n") + len(f"$ {prompt}\n")
    return text[start:text.index("```", start)]


# Commands that only read: the pages' examples of these run as written against the sandbox.
READS = {("release", "list"), ("release", "show"), ("release", "diff"), ("history",), ("status",), ("reservations",),
         ("jobs", "list"), ("drills",), ("slo",), ("licence", "list"), ("exception", "list")}


def read_examples() -> list[list[str]]:
    """The pages' read-only ``kimi-ops`` lines with nothing left to fill in (no ``ENDPOINT``, ``N`` or ``…``)."""
    return [words for words in command_lines()
            if (tuple(words[:2]) in READS or tuple(words[:1]) in READS)
            and not any(w.isupper() or w == "x" for w in words)]
