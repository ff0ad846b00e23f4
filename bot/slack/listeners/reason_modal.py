"""One reason form for every button that asks why: open it, refuse a blank or lost one in the acknowledgement, act.

Reject (a gate), Approve above the measured limits (a traffic gate) and Silence… (a watch alert) each open a
modal built by ``bot.adapters.slack.blocks`` whose ``private_metadata`` carries the clicked button's ticket,
channel and message. A :class:`ReasonForm` names the form and its sentences; :func:`open_form` opens it for
the clicker (a trigger lives 3 seconds: when Slack refuses, the clicker is told nothing happened), and
:func:`register_form` acknowledges a submission only with its ticket and a reason, then hands both on as a
job, which :func:`form_handler` runs through the form's action.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slack_bolt import Ack, App, BoltContext
from slack_sdk.errors import SlackApiError

from bot.logs import logger_for
from bot.slack.answers import Tell, clicker, guard
from bot.slack.deps import SlackDeps
from bot.slack.intake import Intake
from bot.slack.job import Job
from bot.slack.listeners.acks import Handler, dig
from bot.slack.middleware.replay_guard import KEY
from bot.views.parts import Reply, reply

log = logger_for(__name__)


def reason(view: dict[str, Any]) -> str:
    """The reason typed into the form; empty when the form came back without it (no ``state``, or not as we sent it)."""
    typed = dig(dig(dig(dig(view.get("state"), "values"), "reason"), "reason"), "value")
    return typed.strip() if isinstance(typed, str) else ""


def metadata(view: dict[str, Any]) -> dict[str, Any] | None:
    """What the form carried from the click (the ticket, channel, message); None when it is not what we wrote."""
    try:
        meta = json.loads(view.get("private_metadata") or "")
    except (TypeError, ValueError):
        return None
    return meta if isinstance(meta, dict) and isinstance(meta.get("ticket"), str) else None


@dataclass(frozen=True)
class ReasonForm:
    """A reason modal: its ``callback_id`` and what it says when lost, left blank or not opened."""

    callback_id: str
    lost: str  # the form no longer carries its ticket
    blank: str  # submitted without a reason
    undone: str  # what did not happen when Slack could not open the form ("rejected")
    again: str  # how to try again ("Click Reject again.")


# What a submission asks of the form's action: the process's deps, the submitter, the carried metadata, the
# reason, and the form's other answers (its ``state``, as Slack sent it).
Act = Callable[[SlackDeps, str, dict[str, Any], str, dict[str, Any]], Reply | None]


def open_form(deps: SlackDeps, form: ReasonForm, trigger_id: str, view: dict[str, Any], tell: Tell) -> None:
    try:
        deps.client.views_open(trigger_id=trigger_id, view=view)
    except SlackApiError as exc:
        log.warning("views.open failed for %s: %s", form.callback_id, exc.response.get("error"))
        tell(reply(f"Slack could not open the reason form ({exc.response.get('error')}); nothing was {form.undone}. "
                   f"{form.again}"))


def register_form(app: App, intake: Intake, form: ReasonForm) -> None:
    """Answer ``form``'s submissions: refused in the acknowledgement without a ticket or reason, else a job whose
    handler is :func:`form_handler` over the form's action."""

    def acknowledge(ack: Ack, body: dict[str, Any], view: dict[str, Any], context: BoltContext) -> None:
        meta, why = metadata(view), reason(view)
        if meta is None:
            ack(response_action="errors", errors={"reason": form.lost})
        elif not why:
            ack(response_action="errors", errors={"reason": form.blank})
        else:
            channel = meta.get("channel") if isinstance(meta.get("channel"), str) else None
            intake.submit(Job(form.callback_id, str(context[KEY]), str(dig(body.get("user"), "id") or ""),
                              channel=channel, args={"meta": meta, "reason": why, "state": view.get("state")}), ack)

    app.view(form.callback_id)(acknowledge)


def form_handler(act: Act) -> Handler:
    """The job of a reason form's submission: ``act`` for the submitter, answered to them alone."""

    def submitted(deps: SlackDeps, job: Job) -> None:
        tell = clicker(deps.client, job.actor, job.channel, None)
        meta, why = job.args.get("meta") or {}, str(job.args.get("reason") or "")
        answer = guard(lambda: act(deps, job.actor, meta, why, {"state": job.args.get("state")}), tell)
        deps.follow(answer, tell, job.channel)

    return submitted
