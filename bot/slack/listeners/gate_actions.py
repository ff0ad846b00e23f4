"""Gate buttons (Approve, Reject, Re-run checks, Accept proposed limits, Accept limits and approve, Approve above
the limits…) and the reason modals.

Each button is acknowledged at once with its job (:mod:`bot.slack.listeners.acks`); the job's handler resolves the clicker and
calls :mod:`commands.actions` with the ticket the button carried (deployment,
gate, report hash, release hash), so the services refuse stale, decided or
self-approved clicks. A press is decided before anything is shown: a refusal
goes to the presser alone, and the shared gate message changes only for a
decision that was taken. Reject, and approving a traffic gate above the limits its
sweep measured safe, first open a modal asking why; a submission is refused in
the acknowledgement when the reason is empty.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from slack_bolt import App
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.adapters.slack.blocks import OVERRIDE_MODAL, REJECT_MODAL, override_modal, reject_modal
from bot.logs import logger_for
from bot.slack.answers import Tell, clicker, guard, respond_to
from bot.slack.deps import SlackDeps
from bot.slack.intake import Intake
from bot.slack.job import Job
from bot.slack.listeners.acks import Handler, dig, hand_click
from bot.slack.listeners.reason_modal import ReasonForm, form_handler, open_form, register_form
from bot.views.actions import (
    ACCEPT_AND_APPROVE,
    ACCEPT_LIMITS,
    APPROVE,
    APPROVE_ABOVE_LIMITS,
    RECHECK,
    REJECT,
    SHOW_CHECKS,
)
from bot.views.parts import Reply, reply
from commands import actions

log = logger_for(__name__)
T = TypeVar("T")
CHECKING_AFTER = 1.5
"""Seconds a press may take to be decided before its presser is told it is being checked."""


def now_running(client: WebClient, job: Job, line: str) -> None:
    """The clicked message, changed at once after a press that was accepted: its buttons gone, ``line`` saying what runs.

    Only ever called once the press was decided (a refused press never changes the shared message). The job
    carries the message as it was clicked (``args["message"]``) and where it is (channel, thread).
    """
    message = job.args.get("message")
    blocks = dig(message, "blocks")
    if not (job.channel and job.thread and isinstance(blocks, list)):
        return
    kept = [b for b in blocks if isinstance(b, dict) and b.get("type") != "actions"]
    kept.append({"type": "context", "elements": [{"type": "mrkdwn", "text": line}]})
    try:
        client.chat_update(channel=job.channel, ts=job.thread, text=line, blocks=kept)
    except SlackApiError as exc:  # the press stands; the outbox rewrites the message anyway
        log.info("could not mark the clicked message as running (%s)", exc.response.get("error"))


def decided_first(work: Callable[[], T], tell: Tell, checking: str) -> T | None:
    """``work`` (a press that may be refused) decided before anything is shown; the presser alone hears ``checking``
    if the decision takes longer than :data:`CHECKING_AFTER` seconds. The shared message changes afterwards, through
    the outbox, only for a decision that was taken."""
    decided = threading.Event()  # set once the answer is known: no "checking…" may follow it
    order = threading.Lock()

    def say_checking() -> None:
        with order:
            if not decided.is_set():
                tell(reply(checking))

    def tell_decided(answer: Reply) -> None:  # a refusal (or a crash's correlation id), after any "checking…"
        with order:
            decided.set()
        tell(answer)

    timer = threading.Timer(CHECKING_AFTER, say_checking)
    timer.daemon = True
    timer.start()
    try:
        return guard(work, tell_decided)
    finally:
        timer.cancel()
        with order:
            decided.set()


REJECT_FORM = ReasonForm(
    REJECT_MODAL, lost="This form no longer says which gate it rejects; nothing was rejected. Close it and click Reject "
                       "on the gate again.",
    blank="Say why the gate is rejected.", undone="rejected", again="Click Reject again.")
OVERRIDE_FORM = ReasonForm(
    OVERRIDE_MODAL, lost="This form no longer says which gate it approves; nothing was approved. Close it and click "
                         "again.",
    blank="Say why the endpoint may go live above its measured limits.", undone="approved", again="Click again.")


def register(app: App, intake: Intake) -> None:
    app.action(SHOW_CHECKS)(hand_click(intake, "show_checks"))
    app.action(APPROVE)(hand_click(intake, "approve"))
    app.action(ACCEPT_AND_APPROVE)(hand_click(intake, "accept_and_approve"))
    app.action(APPROVE_ABOVE_LIMITS)(hand_click(intake, "ask_override", at_once=True))  # opens a form: the trigger
    register_form(app, intake, OVERRIDE_FORM)
    app.action(RECHECK)(hand_click(intake, "recheck", blocks=True))
    app.action(ACCEPT_LIMITS)(hand_click(intake, "accept_limits"))
    app.action(REJECT)(hand_click(intake, "ask_reason", at_once=True))  # opens a form: the trigger
    register_form(app, intake, REJECT_FORM)


def _clicker(deps: SlackDeps, job: Job) -> Tell:
    return clicker(deps.client, job.actor, job.channel, respond_to(job.response_url))


def approve(deps: SlackDeps, job: Job) -> None:
    tell = _clicker(deps, job)
    # Decided first: a refused press is told to its presser alone and the gate message never shows it; an
    # approval reaches the message through the outbox (no buttons, who approved), right after this answer.
    answer = decided_first(lambda: actions.decide(deps.root, deps.identity(job.actor), job.args.get("value"),
                                                  "approved"), tell, "Checking your approval…")
    deps.follow(answer, tell, job.channel)


def accept_and_approve(deps: SlackDeps, job: Job) -> None:
    tell = _clicker(deps, job)
    answer = decided_first(lambda: actions.accept_and_approve(deps.root, deps.identity(job.actor), job.args.get("value")),
                           tell, "Checking the limits and your approval…")
    deps.follow(answer, tell, job.channel)


def ask_reason(deps: SlackDeps, job: Job) -> None:
    tell = _clicker(deps, job)
    value = job.args.get("value")
    seen = guard(lambda: actions.may_decide(deps.ctx, deps.identity(job.actor), value), tell)
    if seen is None:
        return
    open_form(deps, REJECT_FORM, job.trigger or "",
              reject_modal(value or "", seen.gate, seen.deployment_id, job.channel, job.thread), tell)


def ask_override(deps: SlackDeps, job: Job) -> None:
    tell = _clicker(deps, job)
    value = job.args.get("value")
    seen = guard(lambda: actions.may_decide(deps.ctx, deps.identity(job.actor), value), tell)
    if seen is None:
        return
    open_form(deps, OVERRIDE_FORM, job.trigger or "", override_modal(value or "", seen.deployment_id, job.channel,
                                                                     job.thread), tell)


def recheck(deps: SlackDeps, job: Job) -> None:
    tell = _clicker(deps, job)
    answer = decided_first(lambda: actions.recheck(deps.root, deps.identity(job.actor), job.args.get("value")), tell,
                           "Checking…")
    if answer is not None:  # accepted: these buttons no longer do anything, and the new report follows
        now_running(deps.client, job, f":hourglass_flowing_sand: <@{job.actor}> is re-running these checks; "
                                      "the new report follows in this thread.")
    deps.follow(answer, tell, job.channel)


def accept_limits(deps: SlackDeps, job: Job) -> None:
    tell = _clicker(deps, job)
    answer = guard(lambda: actions.accept_limits(deps.root, deps.identity(job.actor), job.args.get("value")), tell)
    deps.follow(answer, tell, job.channel)


def reject(deps: SlackDeps, user: str, meta: dict[str, Any], why: str, _answers: dict[str, Any]) -> Reply:
    return actions.decide(deps.root, deps.identity(user), meta.get("ticket"), "rejected", why)


def approve_above(deps: SlackDeps, user: str, meta: dict[str, Any], why: str, _answers: dict[str, Any]) -> Reply:
    return actions.decide(deps.root, deps.identity(user), meta.get("ticket"), "approved", override_reason=why)


def show_checks(deps: SlackDeps, job: Job) -> None:
    tell = _clicker(deps, job)
    answer = guard(lambda: actions.show_checks(deps.ctx, deps.identity(job.actor), job.args.get("value")), tell)
    if answer is not None:
        tell(answer)


HANDLERS: dict[str, Handler] = {
    "show_checks": show_checks, "approve": approve, "accept_and_approve": accept_and_approve,
    "ask_override": ask_override, OVERRIDE_FORM.callback_id: form_handler(approve_above), "recheck": recheck,
    "accept_limits": accept_limits, "ask_reason": ask_reason, REJECT_FORM.callback_id: form_handler(reject),
}
