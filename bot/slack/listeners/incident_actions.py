"""The metrics-watch alert buttons: Acknowledge, Silence… (a form: how long and why) and Roll back.

Each click is acknowledged at once with its job; the job's handler resolves the clicker and calls :mod:`commands.incidents`,
whose services authorise and audit. A silence submitted without a reason is refused in the acknowledgement (the shared
:mod:`bot.slack.listeners.reason_modal`).
"""

from __future__ import annotations

from typing import Any

from slack_bolt import App

from bot.adapters.slack.blocks import SILENCE_MODAL, silence_modal
from bot.services.incidents import SILENCE_CHOICES_HOURS
from bot.slack.answers import Tell, clicker, guard, respond_to
from bot.slack.deps import SlackDeps
from bot.slack.intake import Intake
from bot.slack.job import Job
from bot.slack.listeners.acks import Handler, dig, hand_click
from bot.slack.listeners.reason_modal import ReasonForm, form_handler, open_form, register_form
from bot.views.actions import INCIDENT_ACK, INCIDENT_ROLLBACK, INCIDENT_SILENCE
from bot.views.parts import Reply
from commands import incidents

SILENCE_FORM = ReasonForm(
    SILENCE_MODAL, lost="This form no longer says which alert it silences; close it and click Silence again.",
    blank="Say why the alert is silenced.", undone="silenced", again="Click Silence again.")


def hours(view: dict[str, Any]) -> str | None:
    """The chosen duration: a select's ``selected_option`` (or a typed ``value``, as a plain input sends it)."""
    picked = dig(dig(dig(view.get("state"), "values"), "hours"), "hours")
    chosen = dig(dig(picked, "selected_option"), "value") or dig(picked, "value")
    return chosen if isinstance(chosen, str) else None


def register(app: App, intake: Intake) -> None:
    app.action(INCIDENT_ACK)(hand_click(intake, "incident_ack"))
    app.action(INCIDENT_ROLLBACK)(hand_click(intake, "incident_rollback"))
    app.action(INCIDENT_SILENCE)(hand_click(intake, "ask_silence", at_once=True))  # opens a form: the trigger
    register_form(app, intake, SILENCE_FORM)


def _clicker(deps: SlackDeps, job: Job) -> Tell:
    return clicker(deps.client, job.actor, job.channel, respond_to(job.response_url))


def acknowledge(deps: SlackDeps, job: Job) -> None:
    tell = _clicker(deps, job)
    answer = guard(lambda: incidents.acknowledge(deps.ctx, deps.identity(job.actor), job.args.get("value")), tell)
    deps.follow(answer, tell, job.channel)


def roll_back(deps: SlackDeps, job: Job) -> None:
    tell = _clicker(deps, job)
    answer = guard(lambda: incidents.roll_back(deps.root, deps.identity(job.actor), job.args.get("value")), tell)
    deps.follow(answer, tell, job.channel)


def ask_silence(deps: SlackDeps, job: Job) -> None:
    tell = _clicker(deps, job)
    number = guard(lambda: incidents.incident_id(job.args.get("value")), tell)
    if number is None:
        return
    open_form(deps, SILENCE_FORM, job.trigger or "",
              silence_modal(number, f"incident #{number}", job.channel, job.thread, SILENCE_CHOICES_HOURS), tell)


def silence(deps: SlackDeps, user: str, meta: dict[str, Any], why: str, answers: dict[str, Any]) -> Reply:
    return incidents.silence(deps.ctx, deps.identity(user), meta.get("ticket"), hours(answers), why)


HANDLERS: dict[str, Handler] = {"incident_ack": acknowledge, "incident_rollback": roll_back, "ask_silence": ask_silence,
                                SILENCE_FORM.callback_id: form_handler(silence)}
