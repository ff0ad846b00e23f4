"""Acknowledgements that hand a typed job on: read the request once, build its :class:`bot.slack.job.Job`, ack.

Every listener acknowledges through an :class:`bot.slack.intake.Intake`, which records the job (in the shared
database under ``kimi-ops serve``) before the answer leaves; the job's handler (``HANDLERS`` in each listener
module, run by :func:`bot.slack.handlers.run_job`) does the work, in the worker process or here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slack_bolt import Ack, BoltContext

from bot.slack.deps import SlackDeps
from bot.slack.intake import Intake
from bot.slack.job import Job
from bot.slack.middleware.replay_guard import KEY

Handler = Callable[[SlackDeps, Job], None]
Listener = Callable[..., None]


def dig(value: Any, key: str) -> Any:
    """``value[key]`` when ``value`` is a dict, else None (Slack's payloads are read without trusting their shape)."""
    return value.get(key) if isinstance(value, dict) else None


def text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def ack_now(ack: Ack) -> None:
    ack()


def click_job(kind: str, body: dict[str, Any], context: BoltContext, **args: Any) -> Job:
    """A button's job: who clicked, where, the button's value (``args`` adds what the handler needs besides)."""
    action = (body.get("actions") or [{}])[0]  # the shape middleware let through only clicks with an action and a user
    container = body.get("container")
    return Job(kind, str(context[KEY]), str(dig(body.get("user"), "id") or ""),
               channel=text(dig(body.get("channel"), "id")) or text(dig(container, "channel_id")),
               thread=text(dig(container, "message_ts")), response_url=text(body.get("response_url")),
               trigger=text(body.get("trigger_id")), args={"value": text(dig(action, "value")), **args})


def hand_click(intake: Intake, kind: str, *, at_once: bool = False, blocks: bool = False) -> Listener:
    """A button's acknowledgement: its job to ``intake`` (``blocks``: with the clicked message, which the job edits)."""

    def acknowledge(ack: Ack, body: dict[str, Any], context: BoltContext) -> None:
        message = body.get("message") if blocks else None
        extra = {"message": {"text": dig(message, "text"), "blocks": dig(message, "blocks")}} if message else {}
        intake.submit(click_job(kind, body, context, **extra), ack, at_once=at_once)

    return acknowledge
