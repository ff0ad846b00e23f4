"""Acknowledgement functions shared by listeners whose checks all happen after the ack."""

from __future__ import annotations

from slack_bolt import Ack


def ack_now(ack: Ack) -> None:
    ack()
