"""Text from outside kimi-ops, made literal before it enters a chat message.

kimi-ops's messages are Slack mrkdwn: ``<@U…>`` mentions a person, ``<!channel>``
notifies a whole channel, ``<https://…|label>`` is a link that reads as ``label``.
Text kimi-ops did not write — a reason a person typed (``--reason``, a reject or
silence form), an alert's annotations and labels, an error an endpoint, the cluster
or AWS answered, any stored reason that may hold one of those — is shown as typed:
:func:`literal` escapes ``&``, ``<`` and ``>`` as Slack's "Escaping text" asks
(``&amp;``, ``&lt;``, ``&gt;``), so such text never mentions, notifies or links.
It is the one helper every message that embeds outside text uses, wherever that
message is composed (a view, the notifier, or a service writing an event's text).
Stored rows, audit entries and logs keep the text as it came.

kimi-ops writes the people it names by their bare Slack user id (``rejected by
U0APPROVER1``), and the Slack adapter turns each :data:`BARE_ID` into a mention.
An id typed in outside text (``--reason ping U0ABCDEF12``) is not one of those:
:func:`literal` puts :data:`OUTSIDE` (a word joiner, U+2060) before it, the
conversion leaves an id so marked as written, and :func:`unmarked` takes the
marks out before the text is shown (Slack, a terminal). A reason kimi-ops stored
around a person's words (``artifact gate rejected by U0APPROVER1: …``) is shown
through :func:`stored_reason`, given the deployment's actors: the people its
records say acted on it (asked, decided a gate, cancelled, accepted limits…).
Their ids stay mentions; any other id was typed, whatever words stand around it.
"""

from __future__ import annotations

import re
from collections.abc import Collection

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})

OUTSIDE = "\u2060"
"""Put before a Slack-user-id-shaped word of outside text: no mention is made of it."""

TYPED = "\u2063"
"""Put, when a reason is stored, before an id-shaped word a person typed into it (:func:`typed`): it never becomes a
mention, not even when that person acted on the deployment (a typed "ask U0REQUESTER" stays as typed)."""

BARE_ID = re.compile(r"(?<![<@\w/:=\u2060\u2063-])([UW](?=[A-Z0-9]*[0-9])[A-Z0-9]{6,})(?![\w>-])")
"""A Slack user id written bare in a sentence ("rejected by U0APPROVER1"): letters and digits, at least one digit."""


def literal(text: object) -> str:
    """``text`` as literal mrkdwn: Slack shows it exactly as written, with no mention, notification or link."""
    return BARE_ID.sub(OUTSIDE + r"\1", str(text).translate(_ESCAPES))


_MARKED_ID = re.compile(OUTSIDE + r"([UW][A-Z0-9]{6,})")


def typed(text: str) -> str:
    """What a person typed, as kimi-ops stores it inside a reason it writes (``rejected by U…: TYPED``)."""
    return BARE_ID.sub(TYPED + r"\1", text)


def stored_reason(text: object, actors: Collection[str]) -> str:
    """A reason kimi-ops stored, made literal like :func:`literal`, except the ids of ``actors`` (the people the
    deployment records as acting on it) that kimi-ops wrote, which stay mentions; an id typed into it (marked by
    :func:`typed`, or any id of someone else) stays as typed."""
    shown = _MARKED_ID.sub(lambda m: m.group(1) if m.group(1) in actors else m.group(0), literal(text))
    return shown.replace(TYPED, OUTSIDE)


def unmarked(text: str) -> str:
    """``text`` without the marks :func:`literal` and :func:`typed` put on ids typed in outside text (as shown)."""
    return text.replace(OUTSIDE, "").replace(TYPED, "")
