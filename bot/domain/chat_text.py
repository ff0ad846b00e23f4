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
"""

from __future__ import annotations

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def literal(text: object) -> str:
    """``text`` as literal mrkdwn: Slack shows it exactly as written, with no mention, notification or link."""
    return str(text).translate(_ESCAPES)
