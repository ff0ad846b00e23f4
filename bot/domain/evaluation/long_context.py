"""The generated long-context case: filler text of a configured size around a needle to find."""

from __future__ import annotations

import random

from bot.domain.evaluation.eval_set import EvalCase, EvalSet, ImagePart, Message, TextPart

_WORDS = [
    "cluster",
    "node",
    "replica",
    "shard",
    "lease",
    "quota",
    "region",
    "bucket",
    "prefix",
    "manifest",
    "digest",
    "tensor",
    "kernel",
    "batch",
    "queue",
    "token",
    "window",
    "cache",
    "block",
    "scheduler",
    "driver",
    "latency",
    "budget",
    "rollout",
    "gate",
    "audit",
    "release",
    "weight",
    "layer",
    "expert",
]


def filler_text(tokens: int, needle: str, seed: int = 7) -> str:
    """About ``tokens`` tokens of deterministic prose with ``needle`` placed in the middle.

    Four characters per token is the usual estimate for English-like text with
    BPE tokenizers; the generator targets characters so the size is stable.
    """
    rng = random.Random(seed)
    target_chars = tokens * 4
    half = target_chars // 2
    parts: list[str] = []
    size = -1  # n parts are joined by n - 1 newlines
    inserted = False
    line = 0
    while size < target_chars:
        if not inserted and size >= half:
            parts.append(needle)
            size += len(needle) + 1
            inserted = True
            continue
        line += 1
        sentence = f"Record {line}: " + " ".join(rng.choice(_WORDS) for _ in range(12)) + "."
        parts.append(sentence)
        size += len(sentence) + 1
    if not inserted:
        parts.append(needle)
    return "\n".join(parts)


def expand(eval_set: EvalSet, *, long_context_tokens: int | None = None) -> list[EvalCase]:
    """The set's cases ready to send: each filler generated and prepended to the last user message."""
    size_default = long_context_tokens or eval_set.long_context_tokens
    out: list[EvalCase] = []
    for case in eval_set.cases:
        if case.filler is None:
            out.append(case)
            continue
        size = long_context_tokens or case.filler.tokens or size_default
        document = filler_text(size, case.filler.needle, case.filler.seed)
        messages = list(case.messages)
        last_user = (
            max(i for i, m in enumerate(messages) if m.role == "user") if any(m.role == "user" for m in messages) else None
        )
        if last_user is None:
            messages.append(Message(role="user", content=document))
        else:
            msg = messages[last_user]
            if isinstance(msg.content, str):
                content: str | list[TextPart | ImagePart] = f"{document}\n\n{msg.content}"
            else:
                content = [TextPart(text=document), *msg.content]
            messages[last_user] = Message(role=msg.role, content=content)
        out.append(case.model_copy(update={"messages": messages, "filler": None}))
    return out
