"""Icons by meaning, as Unicode emoji a terminal can show; the Slack renderer swaps in its own emoji names."""

from __future__ import annotations

from enum import StrEnum

from bot.domain.states import State


class Icon(StrEnum):
    PASS = "\u2705"          # check mark
    WARN = "\u26a0\ufe0f"    # warning sign
    FAIL = "\u274c"          # cross
    ERROR = "\u2757"         # exclamation mark
    LIVE = "\U0001f7e2"      # green circle
    FAILED = "\U0001f534"    # red circle
    REJECTED = "\u26d4"      # no entry
    ENDED = "\u26ab"         # black circle
    SUPERSEDED = "\u26aa"    # white circle
    WAITING = "\u23f3"       # hourglass


STATUS_ICON: dict[str, Icon] = {"pass": Icon.PASS, "warn": Icon.WARN, "fail": Icon.FAIL, "error": Icon.ERROR}
"""A check's status."""

STATE_ICON: dict[State, Icon] = {
    State.LIVE: Icon.LIVE, State.FAILED: Icon.FAILED, State.REJECTED: Icon.REJECTED, State.CANCELLED: Icon.ENDED,
    State.INTERRUPTED: Icon.ENDED, State.SUPERSEDED: Icon.SUPERSEDED,
}
"""A deployment's state; every state not listed is still on its way (:attr:`Icon.WAITING`)."""


def state_icon(state: str) -> Icon:
    return STATE_ICON.get(State(state), Icon.WAITING)
