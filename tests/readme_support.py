"""The README's terminal examples, read from its code blocks, so tests can hold them to what ships."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"```(?:bash|text)\n(.*?)```", re.DOTALL)


def command_lines() -> list[list[str]]:
    """Every ``kimi-ops …`` line of the README's bash and text blocks as words (comments and prompts dropped)."""
    found: list[list[str]] = []
    for block in _BLOCK.findall(README.read_text()):
        for line in block.splitlines():
            line = re.sub(r"^\$ |^\./dev run ", "", line.strip())
            if not line.startswith("kimi-ops "):
                continue
            line = line.split("  #")[0].split(" # ")[0].split(" | ")[0].rstrip(" \\&")
            words = shlex.split(line.replace("[", "").replace("]", "").replace("…", "x"))
            found.append(words[1:])
    return found


def text_block_after(prompt: str) -> str:
    """The output the README shows under ``$ PROMPT`` in a text block."""
    text = README.read_text()
    start = text.index(f"$ {prompt}\n") + len(f"$ {prompt}\n")
    return text[start:text.index("```", start)]


# Commands that only read: the README's examples of these run as written against the sandbox.
READS = {("release", "list"), ("release", "show"), ("release", "diff"), ("history",), ("status",), ("reservations",),
         ("jobs", "list"), ("drills",), ("slo",), ("licence", "list"), ("exception", "list")}


def read_examples() -> list[list[str]]:
    """The README's read-only ``kimi-ops`` lines with nothing left to fill in (no ``ENDPOINT``, ``N`` or ``…``)."""
    return [words for words in command_lines()
            if (tuple(words[:2]) in READS or tuple(words[:1]) in READS)
            and not any(w.isupper() or w == "x" for w in words)]
