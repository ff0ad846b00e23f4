"""Block Kit from the chat-neutral message model (:mod:`bot.views`), always within Slack's limits.

Slack refuses a message with more than 50 blocks, a section text over 3,000
characters or a button value over 2,000, and in practice a payload of more than
about 13k characters (``msg_blocks_too_long``), counted on the JSON slack_sdk
sends (:func:`json_size`: ``json.dumps`` with its defaults, so a non-ASCII
character counts as its six-character escape), never on a Python ``str(dict)``.
:func:`render` keeps the buttons, fills the rest up to those limits, and returns what did not fit as
plain-text chunks that the notifier posts to the thread, so a long gate report
is summarised in the message and complete in the thread. A ``Detail`` part never
enters the message: it follows in the thread (a code block keeps its fences in
every piece). A ``Table`` fits one section with its code fences, or shows its
first rows there and follows whole in the thread. Icons (:class:`Icon`) become
Slack's emoji names, which the workspace shows the same on every client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from bot.domain.chat_text import BARE_ID, unmarked
from bot.views.actions import COMMAND_FORM
from bot.views.icons import Icon
from bot.views.parts import (
    Buttons,
    CommandForm,
    Detail,
    Divider,
    Heading,
    Note,
    Part,
    Table,
    Text,
    plain,
)

# The reject button opens a modal asking why; its submission comes back under this callback id.
SILENCE_MODAL = "incident_silence_modal"
REJECT_MODAL = "gate_reject_reason"
OVERRIDE_MODAL = "gate_override_reason"
COMMAND_FORM_MODAL = COMMAND_FORM

MAX_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
SECTION_CHARS = 3000
HEADER_CHARS = 150
BUTTON_VALUE_CHARS = 2000
BUTTON_TEXT_CHARS = 75
# Slack answers msg_blocks_too_long well below 50 full sections; stay under the observed ~13k.
PAYLOAD_CHARS = 11_000
FALLBACK_CHARS = 3000

EMOJI: dict[Icon, str] = {
    Icon.PASS: ":white_check_mark:", Icon.WARN: ":warning:", Icon.FAIL: ":x:", Icon.ERROR: ":exclamation:",
    Icon.LIVE: ":large_green_circle:", Icon.FAILED: ":red_circle:", Icon.REJECTED: ":no_entry:", Icon.ENDED: ":black_circle:",
    Icon.SUPERSEDED: ":white_circle:", Icon.WAITING: ":hourglass_flowing_sand:",
}


_CODE = re.compile(r"(```.*?```|`[^`\n]*`)", re.DOTALL)


def mention_people(text: str) -> str:
    """Every bare Slack user ID kimi-ops wrote in ``text`` as a mention (``<@U…>``), which Slack shows as the person's name.

    Code (fenced or inline) is left as written: a table or a command keeps its IDs. So is an ID typed in outside text
    (:func:`bot.domain.chat_text.literal` marked it): a reason saying ``ping U0ABCDEF12`` pings nobody.
    """
    pieces = _CODE.split(text)
    # The marks stay (applied twice, the text mentions nobody more); render() and the posts take them out.
    return "".join(piece if i % 2 else BARE_ID.sub(r"<@\1>", piece) for i, piece in enumerate(pieces))


def slack_text(text: str, *, people: bool = True) -> str:
    """``text`` with every icon as its Slack emoji name and (``people``) every user ID kimi-ops wrote as a mention."""
    for icon, name in EMOJI.items():
        if icon.value in text:
            text = text.replace(icon.value, name)
    return mention_people(text) if people else text


@dataclass(frozen=True)
class Rendered:
    """Blocks to send, the notification text, and what did not fit (to post in the thread)."""

    blocks: list[dict[str, Any]]
    text: str
    overflow: list[str] = field(default_factory=list)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def chunks(text: str, limit: int = SECTION_CHARS) -> list[str]:
    """Split at line boundaries into pieces of at most ``limit`` characters (over-long lines are cut)."""
    pieces: list[str] = []
    current = ""
    for line in text.split("\n"):
        line = _cut(line, limit)
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) > limit:
            pieces.append(current)
            current = line
        else:
            current = candidate
    if current or not pieces:
        pieces.append(current)
    return pieces


def fenced_parts(table: Table) -> list[Part]:
    """``table`` in a code block under its caption, within one section; a longer one is cut and posted whole in the thread."""
    whole = table.fenced
    if len(whole) <= SECTION_CHARS:
        return [Text(whole)]
    caption, what = table.caption, table.what
    lines = table.text.split("\n")
    kept: list[str] = []
    for line in lines:
        tail = f"\n… {len(lines) - len(kept)} more {what} in the thread below"
        if len(caption) + len("\n".join([*kept, line])) + len(tail) + 12 > SECTION_CHARS:
            break
        kept.append(line)
    rest = len(lines) - len(kept)
    return [Text(f"{caption}\n```\n" + "\n".join(kept) + f"\n```\n… {rest} more {what} in the thread below"),
            Detail(table.text, code=True)]


def _slack_part(part: Part) -> list[Part]:
    """``part`` as Slack shows it: icons as emoji names, a table as fenced text (and its rest for the thread)."""
    if isinstance(part, Table):
        return [q for p in fenced_parts(part) for q in _slack_part(p)]
    if isinstance(part, Heading):
        return [Heading(unmarked(slack_text(part.text, people=False)))]  # plain text in Slack: a mention would show raw
    if isinstance(part, Text):
        return [Text(unmarked(slack_text(part.text)))]
    if isinstance(part, Note):
        return [Note(unmarked(slack_text(part.text)))]
    if isinstance(part, Detail):
        return [Detail(unmarked(slack_text(part.text)), part.code)]
    return [part]


def _detail_pieces(detail: Detail) -> list[str]:
    if not detail.code:
        return [piece for piece in chunks(detail.text) if piece]
    fence = "```"
    return [f"{fence}\n{piece}\n{fence}" for piece in chunks(detail.text, SECTION_CHARS - 2 * len(fence) - 2) if piece]


def _content_blocks(part: Part) -> list[Block]:
    if isinstance(part, Heading):
        return [HeaderBlock(text=PlainTextObject(text=_cut(part.text, HEADER_CHARS)))]
    if isinstance(part, Text):
        return [SectionBlock(text=MarkdownTextObject(text=piece)) for piece in chunks(part.text or " ")]
    if isinstance(part, Note):
        return [ContextBlock(elements=[MarkdownTextObject(text=_cut(part.text or " ", SECTION_CHARS))])]
    if isinstance(part, Divider):
        return [DividerBlock()]
    raise TypeError(f"not a content part: {part!r}")


def _actions(part: Buttons) -> ActionsBlock:
    elements = []
    for b in part.buttons:
        if len(b.value) > BUTTON_VALUE_CHARS:
            raise ValueError(f"button value of {b.action_id} is {len(b.value)} characters; Slack allows {BUTTON_VALUE_CHARS}")
        elements.append(ButtonElement(text=PlainTextObject(text=_cut(b.label, BUTTON_TEXT_CHARS)), action_id=b.action_id,
                                      value=b.value, style=b.style))
    return ActionsBlock(elements=elements)


def json_size(value: Any) -> int:
    """Characters of ``value`` as slack_sdk puts it on the wire (``json.dumps`` defaults: ASCII escapes, ", " and ": ")."""
    return len(json.dumps(value))


def _size(block: Block) -> int:
    return json_size(block.to_dict()) + 2  # ", " between blocks in the sent list


# A slash command's answer posts its message and at most one more (Slack allows five posts per response_url).
OVERFLOW_POST_CHARS = PAYLOAD_CHARS


def one_post(pieces: Sequence[str], limit: int = OVERFLOW_POST_CHARS) -> str | None:
    """The overflow ``pieces`` as the text of one post, at most ``limit`` characters of JSON, saying what was left out."""
    kept: list[str] = []
    for index, piece in enumerate(pieces):
        rest = len(pieces) - index - 1
        tail = f"\n… {rest} more part(s) not shown; ask for less (e.g. `--page`)." if rest else ""
        if json_size("\n".join([*kept, piece]) + tail) > limit:
            left = len(pieces) - len(kept)
            kept.append(f"… {left} more part(s) not shown; ask for less (e.g. `--page`).")
            break
        kept.append(piece)
    return "\n".join(kept) if kept else None


def render(parts: Sequence[Part], *, max_blocks: int = MAX_BLOCKS, max_chars: int = PAYLOAD_CHARS) -> Rendered:
    """Blocks for ``parts``; buttons always kept, content cut where a limit would be crossed."""
    parts = [q for p in parts for q in _slack_part(p)]
    actions = [_actions(p) for p in parts if isinstance(p, Buttons)]
    details = [piece for p in parts if isinstance(p, Detail) for piece in _detail_pieces(p)]
    content = [p for p in parts if not isinstance(p, (Buttons, Detail))]
    budget_blocks = max_blocks - len(actions) - 1  # one block is reserved for the "more in the thread" note
    budget_chars = max_chars - sum(_size(a) for a in actions) - 200
    blocks: list[Block] = []
    overflow_lines: list[str] = []
    used = 0
    for part in content:
        if overflow_lines:
            overflow_lines.append(plain([part]))
            continue
        built = _content_blocks(part)
        size = sum(_size(b) for b in built)
        if len(blocks) + len(built) > budget_blocks or used + size > budget_chars:
            overflow_lines.append(plain([part]))
            continue
        blocks.extend(built)
        used += size
    overflow = [piece for piece in chunks("\n".join(line for line in overflow_lines if line)) if piece] if overflow_lines else []
    if overflow:
        hidden = sum(len([ln for ln in piece.split("\n") if ln]) for piece in overflow)
        blocks.append(ContextBlock(elements=[MarkdownTextObject(
            text=f"…and {hidden} more line(s), posted in the thread below")]))
    blocks.extend(actions)
    dicts = [b.to_dict() for b in blocks]  # to_dict() validates every per-field limit
    return Rendered(blocks=dicts, text=_cut(plain(content) or " ", FALLBACK_CHARS), overflow=overflow + details)


def home_view(parts: Sequence[Part]) -> dict[str, Any]:
    """An App Home ``home`` view (up to 100 blocks)."""
    rendered = render(parts, max_blocks=MAX_VIEW_BLOCKS, max_chars=40_000)
    return {"type": "home", "blocks": rendered.blocks}


def _reason_modal(callback_id: str, title: str, submit: str, question: str, ticket_value: str, channel: str | None,
                  message_ts: str | None) -> dict[str, Any]:
    """A modal asking for a reason; the ticket rides in ``private_metadata`` (≤ 3000 chars)."""
    metadata = json.dumps({"ticket": ticket_value, "channel": channel, "ts": message_ts}, separators=(",", ":"))
    return {
        "type": "modal",
        "callback_id": callback_id,
        "private_metadata": metadata,
        "title": {"type": "plain_text", "text": title},
        "submit": {"type": "plain_text", "text": submit},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": question}},
            {"type": "input", "block_id": "reason", "label": {"type": "plain_text", "text": "Reason"},
             "element": {"type": "plain_text_input", "action_id": "reason", "multiline": True, "max_length": 500}},
        ],
    }


def reject_modal(ticket_value: str, gate: str, deployment_id: int, channel: str | None, message_ts: str | None) -> dict[str, Any]:
    """The modal asking why a gate is rejected."""
    return _reason_modal(REJECT_MODAL, "Reject gate", "Reject",
                         f"Reject the *{gate}* gate of deployment #{deployment_id}? The deployment ends.",
                         ticket_value, channel, message_ts)


def override_modal(ticket_value: str, deployment_id: int, channel: str | None, message_ts: str | None) -> dict[str, Any]:
    """The modal asking why a traffic gate is approved while the endpoint admits more than was measured safe."""
    return _reason_modal(OVERRIDE_MODAL, "Approve above limits", "Approve",
                         f"Approve the *traffic* gate of deployment #{deployment_id} while the endpoint admits more "
                         "concurrent requests than the sweep measured safe? The reason is recorded with the approval.",
                         ticket_value, channel, message_ts)


def silence_modal(incident_id: int, what: str, channel: str | None, message_ts: str | None,
                  hours: tuple[int, ...]) -> dict[str, Any]:
    """The form a Silence click opens: for how long (a choice) and why (required)."""
    modal = _reason_modal(SILENCE_MODAL, "Silence alert", "Silence",
                          f"Silence *{what}*? While silenced, it opens and recovers without a message.",
                          str(incident_id), channel, message_ts)
    options = [{"text": {"type": "plain_text", "text": f"{h} hour{'s' if h != 1 else ''}"}, "value": str(h)} for h in hours]
    modal["blocks"].insert(1, {"type": "input", "block_id": "hours", "label": {"type": "plain_text", "text": "For"},
                               "element": {"type": "static_select", "action_id": "hours", "options": options,
                                           "initial_option": options[0]}})
    return modal


def command_form_modal(form: CommandForm, channel: str | None) -> dict[str, Any]:
    """The form a command typed without its reason and expiry opens: a date and a reason; the command rides along."""
    metadata = json.dumps({"command": form.command, "channel": channel}, separators=(",", ":"))
    date: dict[str, Any] = {"type": "datepicker", "action_id": "expires"}
    if form.expires:
        date["initial_date"] = form.expires
    return {
        "type": "modal",
        "callback_id": COMMAND_FORM_MODAL,
        "private_metadata": metadata,
        "title": {"type": "plain_text", "text": form.title[:24]},
        "submit": {"type": "plain_text", "text": "Record"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": form.question}},
            {"type": "input", "block_id": "expires", "label": {"type": "plain_text", "text": "Last day it holds (UTC)"},
             "element": date},
            {"type": "input", "block_id": "reason", "label": {"type": "plain_text", "text": "Reason"},
             "element": {"type": "plain_text_input", "action_id": "reason", "multiline": True, "max_length": 1000}},
        ],
    }
