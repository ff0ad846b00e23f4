"""The traffic gate's request bodies: a :class:`~bot.domain.workload.RequestShape` made into a chat completion.

Prompt text is generated to the shape's token count from three-letter English words
that every common tokenizer reads as one token each (with the chat template's few
tokens on top), so a shape of 30,000 prompt tokens is about 30,000 tokens on the
server. With shared prefixes every prompt starts with the same words and differs
only at its end; with unique prefixes each starts with its own request number, so
no block of it is ever in the prefix cache. Image requests carry the small PNG the
project ships (``bot/data/sweep-image.png``); tool-call requests offer one tool.
``ignore_eos`` holds the output to the shape's length, as vLLM's own benchmark does.
"""

from __future__ import annotations

import base64
from functools import cache
from pathlib import Path
from typing import Any

from bot.domain.sweep import PrefixMode
from bot.domain.workload import RequestShape

WORDS = ("the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was", "one", "our",
         "out", "day", "get", "has", "him", "his", "how", "man", "new", "now", "old", "see", "two", "way", "who")
IMAGE = Path(__file__).resolve().parents[2] / "data" / "sweep-image.png"
TEMPLATE_TOKENS = 11  # the chat template's role markers (5), the request number and the closing words (6)
TOOL = {"type": "function", "function": {
    "name": "lookup_order", "description": "Look an order up by its number.",
    "parameters": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}}}


@cache
def _words(count: int) -> str:
    """``count`` words, the same sequence for every prompt (so shared prompts share their start)."""
    return " ".join(WORDS[(i * 7 + i // len(WORDS)) % len(WORDS)] for i in range(count))


@cache
def image_url() -> str:
    return "data:image/png;base64," + base64.b64encode(IMAGE.read_bytes()).decode()


def prompt_text(mode: PrefixMode, n: int, tokens: int) -> str:
    """About ``tokens`` tokens of prompt: a shared start and a distinct end, or distinct from the first word."""
    words = max(1, tokens - TEMPLATE_TOKENS)
    if mode == "shared":
        return f"{_words(words)}\nRequest {n}: reply OK."
    return f"Request {n}: {_words(words)}\nReply OK."


def chat_body(model: str, shape: RequestShape, mode: PrefixMode, n: int) -> dict[str, Any]:
    """The request body of the sweep's ``n``-th request for ``shape``."""
    text = prompt_text(mode, n, shape.prompt_tokens)
    content: str | list[dict[str, Any]] = text
    if shape.images:
        content = [{"type": "text", "text": text},
                   *({"type": "image_url", "image_url": {"url": image_url()}} for _ in range(shape.images))]
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": content}],
                            "max_tokens": shape.output_tokens, "ignore_eos": True, "temperature": 0}
    if shape.tool_call:
        body["tools"] = [TOOL]
    return body
