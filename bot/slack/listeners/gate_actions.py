"""Gate buttons (Approve, Reject, Re-run checks, Accept proposed limits, Accept limits and approve, Approve above
the limits…) and the reason modals.

Each button is acknowledged at once; the lazy function resolves the clicker and
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

from slack_bolt import App, Respond
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.adapters.slack.blocks import OVERRIDE_MODAL, REJECT_MODAL, override_modal, reject_modal
from bot.logs import logger_for
from bot.slack.answers import Tell, clicker, guard
from bot.slack.deps import SlackDeps
from bot.slack.listeners.acks import ack_now
from bot.slack.listeners.reason_modal import ReasonForm, dig, open_form, register_form
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


def click(body: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """Who clicked, in which channel, and the button's value."""
    action = body["actions"][0]  # the shape middleware let through only clicks with an action and a user
    channel = dig(body.get("channel"), "id") or dig(body.get("container"), "channel_id")
    value = action.get("value")
    return body["user"]["id"], channel if isinstance(channel, str) else None, value if isinstance(value, str) else None


def now_running(client: WebClient, body: dict[str, Any], line: str) -> None:
    """The clicked message, changed at once after a press that was accepted: its buttons gone, ``line`` saying what runs.

    Only ever called once the press was decided (a refused press never changes the shared message).
    """
    message, container = body.get("message"), body.get("container")
    channel = dig(body.get("channel"), "id") or dig(container, "channel_id")
    ts = dig(container, "message_ts")
    blocks = dig(message, "blocks")
    if not (isinstance(channel, str) and isinstance(ts, str) and isinstance(blocks, list)):
        return
    kept = [b for b in blocks if isinstance(b, dict) and b.get("type") != "actions"]
    kept.append({"type": "context", "elements": [{"type": "mrkdwn", "text": line}]})
    try:
        client.chat_update(channel=channel, ts=ts, text=line, blocks=kept)
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


def register(app: App, deps: SlackDeps) -> None:
    def approve(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        # Decided first: a refused press is told to its presser alone and the gate message never shows it; an
        # approval reaches the message through the outbox (no buttons, who approved), right after this answer.
        answer = decided_first(lambda: actions.decide(deps.root, deps.identity(user), value, "approved"), tell,
                               "Checking your approval…")
        deps.follow(answer, tell, channel)

    def accept_and_approve(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        answer = decided_first(lambda: actions.accept_and_approve(deps.root, deps.identity(user), value), tell,
                               "Checking the limits and your approval…")
        deps.follow(answer, tell, channel)

    def ask_reason(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        seen = guard(lambda: actions.may_decide(deps.ctx, deps.identity(user), value), tell)
        if seen is None:
            return
        message_ts = (body.get("container") or {}).get("message_ts")
        open_form(deps, REJECT_FORM, body["trigger_id"],
                  reject_modal(value or "", seen.gate, seen.deployment_id, channel, message_ts), tell)

    def ask_override(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        seen = guard(lambda: actions.may_decide(deps.ctx, deps.identity(user), value), tell)
        if seen is None:
            return
        message_ts = (body.get("container") or {}).get("message_ts")
        open_form(deps, OVERRIDE_FORM, body["trigger_id"],
                  override_modal(value or "", seen.deployment_id, channel, message_ts), tell)

    def recheck(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        answer = decided_first(lambda: actions.recheck(deps.root, deps.identity(user), value), tell, "Checking…")
        if answer is not None:  # accepted: these buttons no longer do anything, and the new report follows
            now_running(deps.client, body, f":hourglass_flowing_sand: <@{user}> is re-running these checks; "
                                           "the new report follows in this thread.")
        deps.follow(answer, tell, channel)

    def accept_limits(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        answer = guard(lambda: actions.accept_limits(deps.ctx, deps.identity(user), value), tell)
        deps.follow(answer, tell, channel)

    def reject(user: str, meta: dict[str, Any], why: str, _view: dict[str, Any]) -> Reply:
        return actions.decide(deps.root, deps.identity(user), meta.get("ticket"), "rejected", why)

    def approve_above(user: str, meta: dict[str, Any], why: str, _view: dict[str, Any]) -> Reply:
        return actions.decide(deps.root, deps.identity(user), meta.get("ticket"), "approved", override_reason=why)

    def show_checks(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        answer = guard(lambda: actions.show_checks(deps.ctx, deps.identity(user), value), tell)
        if answer is not None:
            tell(answer)

    app.action(SHOW_CHECKS)(ack=ack_now, lazy=[show_checks])
    app.action(APPROVE)(ack=ack_now, lazy=[approve])
    app.action(ACCEPT_AND_APPROVE)(ack=ack_now, lazy=[accept_and_approve])
    app.action(APPROVE_ABOVE_LIMITS)(ack=ack_now, lazy=[ask_override])
    register_form(app, deps, OVERRIDE_FORM, approve_above)
    app.action(RECHECK)(ack=ack_now, lazy=[recheck])
    app.action(ACCEPT_LIMITS)(ack=ack_now, lazy=[accept_limits])
    app.action(REJECT)(ack=ack_now, lazy=[ask_reason])
    register_form(app, deps, REJECT_FORM, reject)
