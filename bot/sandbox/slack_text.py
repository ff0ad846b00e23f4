"""Slack's markup as Slack shows it, for the local console: emoji names as emoji, people and groups by name, dates
in words (``3 minutes ago``).

The console (:mod:`bot.cli.shell`) prints what the bot sent the Slack stub; Slack would not show ``:test_tube:`` or
``<!date^…>``, so neither does the console. The emoji come from the ``emoji`` package (part of the ``sandbox``
extra), with Slack's own names for the coloured circles beside its aliases.
"""

from __future__ import annotations

import datetime as dt
import re

# Slack's own names for the coloured circles (its emoji set, iamcal's emoji-data); the emoji package knows the rest.
SLACK_ONLY_EMOJI = {":large_green_circle:": "🟢", ":large_orange_circle:": "🟠", ":large_yellow_circle:": "🟡",
                    ":large_blue_circle:": "🔵", ":large_purple_circle:": "🟣", ":large_brown_circle:": "🟤"}
SLACK_DATE = re.compile(r"<!date\^(\d+)\^([^|>]*)(?:\|([^>]*))?>")


def ago(seconds: float) -> str:
    """How Slack's ``{ago}`` reads: ``12 seconds ago``, ``3 minutes ago``, ``2 hours ago``."""
    whole = max(0, int(seconds))
    for size, unit in ((86_400, "day"), (3600, "hour"), (60, "minute"), (1, "second")):
        if whole >= size or size == 1:
            count = whole // size
            return f"{count} {unit}{'' if count == 1 else 's'} ago"
    return "just now"


def as_slack_shows(text: str, now: dt.datetime | None = None) -> str:
    """``text`` as Slack shows it: emoji names as emoji, ``<@U…>`` as ``@U…``, ``{ago}`` dates measured from ``now``,
    ``&lt;`` ``&gt;`` ``&amp;`` as the characters."""
    import emoji

    for code, shown in SLACK_ONLY_EMOJI.items():
        text = text.replace(code, shown)
    text = emoji.emojize(text, language="alias")

    def date(found: re.Match[str]) -> str:
        at, token, fallback = int(found[1]), found[2], found[3] or ""
        if now is None or "{ago}" not in token:
            return fallback
        return token.replace("{ago}", ago(now.timestamp() - at))

    text = SLACK_DATE.sub(date, text)
    text = re.sub(r"<!subteam\^([A-Z0-9]+)(?:\|[^>]*)?>", r"@\1", text)  # a user group, as Slack names it
    text = re.sub(r"<@([A-Z0-9]+)>", r"@\1", text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")  # escaped text, as typed
