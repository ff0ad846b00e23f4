"""A Slack request's work after its acknowledgement, as a typed job: what to do, for whom, and where to answer.

The answering process reads the request once (Bolt verifies and routes it, an acknowledgement function parses it)
and hands on a :class:`Job`, never the raw Slack body: the kind of work (the handler's name, e.g. ``command`` or
``approve``), its arguments (the command text, the button's value, the form's reason…), the actor, the channel,
the thread (the clicked message's ``ts``), the response URL, the trigger and the request's key across
deliveries. The worker process runs it with :func:`bot.slack.handlers.run_job`, through the same service calls,
without Bolt. A job is plain JSON in the shared database (``slack_work``) or, while that database does not
answer, in the replica's local spool; ``queued_at`` then says when it was acknowledged, so the person hears
when it ran.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, fields, replace
from typing import Any


@dataclass(frozen=True)
class Job:
    kind: str  # the handler that runs it (bot.slack.handlers)
    key: str  # the request's key across deliveries (bot.slack.middleware.replay_guard.delivery_key)
    actor: str  # the Slack user who typed, clicked or submitted
    channel: str | None = None
    thread: str | None = None  # the clicked message's ts, for a button
    response_url: str | None = None
    trigger: str | None = None  # views.open's trigger_id: honoured by Slack for 3 s, so such jobs run at once
    args: dict[str, Any] = field(default_factory=dict)  # the command text, the button's value, the form's answers…
    queued_at: float | None = None  # epoch seconds, when it waited in the local spool (the database was away)
    queued_on: str | None = None  # the replica whose spool it waited in
    # What the acknowledgement parsed, for a job run in the same process (no JSON): the worker parses the text again.
    parsed: object = field(default=None, compare=False, repr=False)

    def as_json(self) -> dict[str, Any]:
        """The job as the store writes it (serialised at once: its ``args`` are the job's own, not a copy).

        Field by field, not :func:`dataclasses.asdict`: that deep-copies ``parsed`` only to drop it, which cost the
        acknowledgement more than the rest of the job."""
        return {name: getattr(self, name) for name in STORED}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data and name != "parsed"}
        return cls(**known)

    def queued(self, at: float, replica: str) -> Job:
        return replace(self, queued_at=at, queued_on=replica)

    def said_as(self) -> str:
        """The request in the person's words: the command typed, or the kind of click."""
        text = self.args.get("text")
        if self.kind == "command" and isinstance(text, str):
            return f"`{' '.join([str(self.args.get('command') or '/kimi'), text]).strip()}`"
        return f"your {self.kind.replace('_', ' ')}"


STORED = tuple(f.name for f in fields(Job) if f.name != "parsed")  # what a job's JSON holds


def clock_time(epoch: float) -> str:
    """``14:03:21 UTC``: when something was queued or ran, as the person reads it."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%H:%M:%S UTC")
