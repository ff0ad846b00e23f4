"""What the local OpenAI-compatible stand-in answers, decided without I/O.

Given one chat-completion request body and the stand-in's :class:`Behaviour`,
:func:`compose` decides the answer: plain text (a configured reply, or the
first configured reply whose pattern matches the prompt), a refusal, a tool
call with JSON arguments valid for the tool's parameter schema, or JSON valid
for the requested ``response_format``. Everything is deterministic so tests
can rely on it; there is no randomness anywhere.

It also holds the stand-in's tokenizer (a word/punctuation split, good enough to
count prompt tokens and share prefixes) and its prefix cache, which hashes
prompts block by block the way vLLM's automatic prefix caching does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
PIECE_RE = re.compile(r"\s*\S+")
IMAGE_TOKENS = 256  # what one image part costs in prompt tokens (a rough vision-encoder figure)


@dataclass(frozen=True)
class Behaviour:
    """How the stand-in behaves; replace fields with ``OpenAIServer.configure(...)`` while it runs.

    The defaults are a healthy vLLM serving ``Kimi-K3``.
    """

    served_model: str = "Kimi-K3"
    extra_models: tuple[str, ...] = ()  # further ids listed by /v1/models (e.g. LoRA adapters)
    answer_model: str | None = None  # model name written into answers; set to lie (the wrong-model case)
    reply: str = "Ready to serve."
    replies: tuple[tuple[str, str], ...] = ()  # (regex on the prompt, reply); the first match wins
    reasoning: str | None = None  # reasoning text streamed before the answer (reasoning parser on)
    first_token_delay: float = 0.0  # seconds before the first token
    token_delay: float = 0.0  # seconds between tokens
    ttft_per_running: float = 0.0  # extra first-token seconds per other running request (saturation)
    # What a request costs, as on a real server: prefill grows with the prompt tokens the prefix cache did not hold
    # (1M tokens/s by default, a fast node so tests stay quick: a 250k-token prompt waits 0.25 s for its first
    # token; raise it to model a slower one), each image adds its encoder's time, and every decode step reads the
    # whole context so far (a token 25 µs slower per 1,000 tokens held).
    prefill_per_token: float = 0.000001
    prefill_per_image: float = 0.005
    # Prompts prefill one after another, as on vLLM, whose scheduler gives a long prompt's chunks the step's token
    # budget before a newcomer's prefill: a short request that arrives during a long prefill waits for its end.
    serial_prefill: bool = False
    decode_per_kilotoken: float = 0.000025
    health_status: int = 200
    fail_status: int | None = None  # answer every chat completion with this status and an error body
    fail_message: str = "EngineCore encountered an issue. See stack trace (above) for the root cause."
    fail_after_tokens: int | None = None  # stream this many tokens, then an error event (status already 200)
    error_shape: Literal["wrapped", "flat"] = "wrapped"  # vLLM >= 0.6 wraps errors in {"error": ...}
    cut_after_tokens: int | None = None  # stream this many tokens, then drop the connection (no finish, no [DONE])
    omit_done: bool = False  # end the stream after the finish reason without data: [DONE]
    empty_answer: bool = False
    omit_finish_reason: bool = False
    max_running: int | None = None  # concurrent requests served at once; None = unbounded
    max_waiting: int = 0  # requests queued beyond max_running before overflow
    overflow_status: int = 429
    honour_tools: bool = True
    honour_response_format: bool = True
    refusal_marker: str = "[refuse]"
    refusal_patterns: tuple[str, ...] = ()
    refusal_text: str = "I'm sorry, but I can't help with that."
    honour_refusals: bool = True
    prefix_block_tokens: int = 16  # vLLM's default KV block size: prefixes are shared in whole blocks
    kv_capacity_tokens: int = 1_048_576  # vLLM will not start unless one max_model_len request fits
    max_model_len: int = 262_144
    legacy_metric_names: bool = False  # expose pre-0.9 names (gpu_cache_usage_perc, gpu_prefix_cache_*)
    prefix_hit_rate_gauge: bool = False  # vLLM <= 0.6: only the vllm:gpu_prefix_cache_hit_rate gauge, no counters


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the OpenAI API carries it


@dataclass(frozen=True)
class Answer:
    """One decided answer: text pieces as they will be streamed, or a tool call."""

    pieces: tuple[str, ...] = ()
    reasoning_pieces: tuple[str, ...] = ()
    tool_call: ToolCall | None = None
    finish_reason: str | None = "stop"

    @property
    def completion_tokens(self) -> int:
        return len(self.pieces) + len(self.reasoning_pieces) + (1 if self.tool_call else 0)


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: tuple[str, ...]
    last_user_text: str
    last_role: str
    images: tuple[str, ...] = ()  # one key per image part (a digest of its URL): the multimodal cache's items

    # Lower-cased once per request for :func:`_found` (None for a text that is not ASCII): every reply and refusal
    # pattern is looked for in it, and the sweep's longest prompts are a megabyte.
    @cached_property
    def folded_text(self) -> str | None:
        return self.text.lower() if self.text.isascii() else None

    @cached_property
    def folded_last_user_text(self) -> str | None:
        return self.last_user_text.lower() if self.last_user_text.isascii() else None


class RequestError(Exception):
    """The request is malformed; carries the HTTP status and vLLM's error type."""

    def __init__(self, status: int, kind: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.param = status, kind, message, param


def _content_text(content: Any) -> tuple[str, list[str]]:
    """Text of a message's content and a key per image it carries."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise RequestError(400, "BadRequestError", "message content must be a string or a list of parts", "messages")
    texts, images = [], []
    for part in content:
        if not isinstance(part, Mapping):
            raise RequestError(400, "BadRequestError", "each content part must be an object", "messages")
        if part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            url = part.get("image_url")
            url = url.get("url", "") if isinstance(url, Mapping) else url
            images.append(hashlib.sha256(str(url).encode()).hexdigest()[:16])
    return "\n".join(texts), images


def _tokens(text: str) -> tuple[str, ...]:
    """``TOKEN_RE.findall(text)``, about twice as fast on the traffic gate's 200k-word prompts: a whitespace-separated
    chunk of letters and digits only (``str.isalnum``, the same characters as ``\\w`` but ``_``) is one token."""
    found: list[str] = []
    for chunk in text.split():  # the same whitespace as ``\\s``
        if chunk.isalnum():
            found.append(chunk)
        else:
            found.extend(TOKEN_RE.findall(chunk))
    return tuple(found)


def read_prompt(body: Mapping[str, Any]) -> Prompt:
    """Flatten the chat messages into one prompt text (roles included, as a chat template would)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "BadRequestError", "messages must be a non-empty list", "messages")
    lines: list[str] = []
    images: list[str] = []
    last_user = ""
    for message in messages:
        if not isinstance(message, Mapping) or "role" not in message:
            raise RequestError(400, "BadRequestError", "each message needs a role", "messages")
        text, found = _content_text(message.get("content"))
        images += found
        lines.append(f"<|{message['role']}|>\n{text}")
        if message["role"] == "user":
            last_user = text
    text = "\n".join(lines)
    tokens = _tokens(text) + ("<image>",) * (len(images) * IMAGE_TOKENS)
    return Prompt(text=text, tokens=tokens, last_user_text=last_user, last_role=str(messages[-1]["role"]),
                  images=tuple(images))


def check_context(behaviour: Behaviour, prompt: Prompt) -> None:
    """Refuse a prompt longer than the context window with vLLM 0.34's own message."""
    count, limit = len(prompt.tokens), behaviour.max_model_len
    if count > limit:
        raise RequestError(
            400, "BadRequestError",
            f"This model's maximum context length is {limit} tokens. However, your prompt contains {count} input "
            "tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input "
            f"prompt. (parameter=input_tokens, value={count})",
            "input_tokens",
        )


def example_for(schema: Mapping[str, Any]) -> Any:
    """A small value valid for common JSON schemas (types, enum/const, required, min sizes)."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for combinator in ("anyOf", "oneOf", "allOf"):
        if schema.get(combinator):
            return example_for(schema[combinator][0])
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props: Mapping[str, Any] = schema.get("properties", {})
        names = schema.get("required") or list(props)
        return {name: example_for(props.get(name, {})) for name in names}
    if kind == "array":
        count = int(schema.get("minItems", 1))
        return [example_for(schema.get("items", {})) for _ in range(count)]
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = "example"
    min_length = int(schema.get("minLength", 0))
    return text + "x" * max(0, min_length - len(text))


def _wanted_tool(body: Mapping[str, Any], prompt: Prompt) -> Mapping[str, Any] | None:
    """The tool a model would call: forced by ``tool_choice``, or named in the last user message."""
    functions = [t.get("function", {}) for t in body.get("tools") or [] if isinstance(t, Mapping)]
    tools: list[Mapping[str, Any]] = [t for t in functions if isinstance(t, Mapping) and t.get("name")]
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return None
    if isinstance(choice, Mapping):
        name = choice.get("function", {}).get("name")
        return next((t for t in tools if t["name"] == name), None)
    if choice == "required":
        return tools[0]
    if prompt.last_role == "tool":
        return None  # the tool already answered: now the model writes its reply
    asked = prompt.last_user_text.lower()
    return next((t for t in tools if str(t["name"]).lower() in asked), None)


def _json_answer(response_format: Mapping[str, Any], reply: str) -> str | None:
    kind = response_format.get("type")
    if kind == "json_object":
        return json.dumps({"answer": reply})
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema") or {"type": "object"}
        return json.dumps(example_for(schema))
    return None


def _refuses(behaviour: Behaviour, prompt: Prompt) -> bool:
    if not behaviour.honour_refusals:
        return False
    if behaviour.refusal_marker and behaviour.refusal_marker in prompt.last_user_text:
        return True
    return any(_found(p, prompt.last_user_text, prompt.folded_last_user_text) for p in behaviour.refusal_patterns)


def _reply_text(behaviour: Behaviour, prompt: Prompt) -> str:
    for pattern, reply in behaviour.replies:
        if _found(pattern, prompt.text, prompt.folded_text):
            return reply
    return behaviour.reply


LITERAL_RE = re.compile(r"[A-Za-z0-9 ]+")


def _found(pattern: str, text: str, folded: str | None) -> bool:
    """``re.search(pattern, text, re.IGNORECASE)``; a pattern of ASCII letters, digits and spaces in an ASCII text is
    looked for in the lower-cased text, ``folded`` (the same answer there, and ten times faster on the sweep's longest
    prompts)."""
    if folded is not None and LITERAL_RE.fullmatch(pattern):
        return pattern.lower() in folded
    return re.search(pattern, text, re.IGNORECASE) is not None


def pieces(text: str) -> tuple[str, ...]:
    """Split text into the pieces a stream carries (each keeps its leading space, like BPE tokens)."""
    return tuple(PIECE_RE.findall(text))


def max_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return None
    if not isinstance(value, int) or value < 1:
        raise RequestError(400, "BadRequestError", f"max_tokens must be at least 1, got {value}.", "max_tokens")
    return value


def compose(behaviour: Behaviour, body: Mapping[str, Any], prompt: Prompt, call_id: str) -> Answer:
    """Decide the answer to one request."""
    finish: str | None = None if behaviour.omit_finish_reason else "stop"
    if behaviour.empty_answer:
        return Answer(finish_reason=finish)
    if _refuses(behaviour, prompt):
        return Answer(pieces=pieces(behaviour.refusal_text), finish_reason=finish)
    reasoning = pieces(behaviour.reasoning) if behaviour.reasoning else ()
    if behaviour.honour_tools and (tool := _wanted_tool(body, prompt)) is not None:
        arguments = json.dumps(example_for(tool.get("parameters") or {"type": "object"}))
        call = ToolCall(id=f"chatcmpl-tool-{call_id}", name=str(tool["name"]), arguments=arguments)
        return Answer(reasoning_pieces=reasoning, tool_call=call, finish_reason=None if finish is None else "tool_calls")
    reply = _reply_text(behaviour, prompt)
    response_format = body.get("response_format")
    if behaviour.honour_response_format and isinstance(response_format, Mapping):
        structured = _json_answer(response_format, reply)
        if structured is not None:
            return Answer(pieces=(structured,), reasoning_pieces=reasoning, finish_reason=finish)
    text = pieces(reply)
    limit = max_tokens(body)
    if limit is not None and body.get("ignore_eos") is True and len(reasoning) + len(text) < limit:
        # vLLM's ignore_eos: generation runs to max_tokens (what load generators send to fix the output length).
        text += (" ok",) * (limit - len(reasoning) - len(text))
        return Answer(pieces=text, reasoning_pieces=reasoning, finish_reason=None if finish is None else "length")
    if limit is not None and len(reasoning) + len(text) > limit:
        kept_reasoning = reasoning[:limit]
        kept = text[: max(0, limit - len(kept_reasoning))]
        return Answer(pieces=kept, reasoning_pieces=kept_reasoning, finish_reason=None if finish is None else "length")
    return Answer(pieces=text, reasoning_pieces=reasoning, finish_reason=finish)


@dataclass
class PrefixCache:
    """Block-hash prefix cache: a prompt hits for every leading block an earlier prompt already filled.

    Not thread-safe on its own; the stand-in's engine calls it under its lock.
    Bounded: the least recently used blocks are forgotten past ``capacity_blocks``.
    """

    block_tokens: int = 16
    capacity_blocks: int = 65_536
    _blocks: OrderedDict[int, None] = field(default_factory=OrderedDict)

    def lookup_and_fill(self, tokens: Sequence[str]) -> int:
        """Number of prompt tokens served from the cache; then remember this prompt's blocks."""
        size = max(1, self.block_tokens)
        parent = 0
        hits = 0
        missed = False
        for start in range(0, len(tokens) - len(tokens) % size, size):
            # Chain the hash through the parent so a block only matches after the same prefix.
            parent = hash((parent, tuple(tokens[start : start + size])))
            if not missed and parent in self._blocks:
                hits += size
                self._blocks.move_to_end(parent)
            else:
                missed = True
                self._blocks[parent] = None
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
        return hits

    def clear(self) -> None:
        self._blocks.clear()
