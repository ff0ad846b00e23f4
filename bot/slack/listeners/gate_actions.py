"""Gate buttons (Approve, Reject, Re-run checks, Accept proposed limits, Approve above the measured limits) and the reason modals.

Each button is acknowledged at once; the lazy function resolves the clicker and
calls :mod:`commands.actions` with the ticket the button carried (deployment,
gate, report hash, release hash), so the services refuse stale, decided or
self-approved clicks. Reject, and approving a traffic gate above the limits its
sweep measured safe, first open a modal asking why; a submission is refused in
the acknowledgement when the reason is empty.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from slack_bolt import Ack, App, Respond
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.adapters.slack.blocks import OVERRIDE_MODAL, REJECT_MODAL, override_modal, reject_modal
from bot.slack.answers import Tell, clicker, guard
from bot.slack.deps import SlackDeps
from bot.slack.listeners.acks import ack_now
from bot.views.actions import ACCEPT_LIMITS, APPROVE, APPROVE_ABOVE_LIMITS, RECHECK, REJECT, SHOW_CHECKS
from bot.views.parts import Reply, reply
from commands import actions

log = logging.getLogger("kimi_ops.slack")


def click(body: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """Who clicked, in which channel, and the button's value."""
    action = body["actions"][0]  # the shape middleware let through only clicks with an action and a user
    channel = _field(body.get("channel"), "id") or _field(body.get("container"), "channel_id")
    value = action.get("value")
    return body["user"]["id"], channel if isinstance(channel, str) else None, value if isinstance(value, str) else None


def now_running(client: WebClient, body: dict[str, Any], line: str) -> None:
    """The clicked message, changed at once: its buttons gone and ``line`` saying what runs now.

    The gate message is rewritten with the decision when the outbox delivers it (seconds later, after the
    engine's next step has been handed on); until then nobody looks at buttons that no longer do anything.
    Called before the decision, so that rewrite always lands after this edit; :func:`restore` undoes it on a refusal.
    """
    message, container = body.get("message"), body.get("container")
    channel = _field(body.get("channel"), "id") or _field(container, "channel_id")
    ts = _field(container, "message_ts")
    blocks = _field(message, "blocks")
    if not (isinstance(channel, str) and isinstance(ts, str) and isinstance(blocks, list)):
        return
    kept = [b for b in blocks if isinstance(b, dict) and b.get("type") != "actions"]
    kept.append({"type": "context", "elements": [{"type": "mrkdwn", "text": line}]})
    try:
        client.chat_update(channel=channel, ts=ts, text=line, blocks=kept)
    except SlackApiError as exc:  # the decision stands; the outbox rewrites the message anyway
        log.info("could not mark the clicked message as running (%s)", exc.response.get("error"))


def refused(client: WebClient, body: dict[str, Any], tell: Tell) -> Tell:
    """``tell``, after putting the clicked message back: a refused click leaves the buttons where they were."""

    def tell_back(answer: Reply) -> None:
        restore(client, body)
        tell(answer)

    return tell_back


def restore(client: WebClient, body: dict[str, Any]) -> None:
    """The clicked message as it was before :func:`now_running` changed it (the click was refused)."""
    message, container = body.get("message"), body.get("container")
    channel = _field(body.get("channel"), "id") or _field(container, "channel_id")
    ts, blocks = _field(container, "message_ts"), _field(message, "blocks")
    if not (isinstance(channel, str) and isinstance(ts, str) and isinstance(blocks, list)):
        return
    try:
        client.chat_update(channel=channel, ts=ts, text=str(_field(message, "text") or ""), blocks=blocks)
    except SlackApiError as exc:
        log.warning("could not put the clicked message back after a refusal (%s)", exc.response.get("error"))


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def reason(view: dict[str, Any]) -> str:
    """The reason typed into the form; empty when the form came back without it (no ``state``, or not as we sent it)."""
    typed = _field(_field(_field(_field(view.get("state"), "values"), "reason"), "reason"), "value")
    return typed.strip() if isinstance(typed, str) else ""


def metadata(view: dict[str, Any]) -> dict[str, Any] | None:
    """What the form carried from the click (the ticket, channel, message); None when it is not what we wrote."""
    try:
        meta = json.loads(view.get("private_metadata") or "")
    except (TypeError, ValueError):
        return None
    return meta if isinstance(meta, dict) and isinstance(meta.get("ticket"), str) else None


LOST_TICKET = "This form no longer says which gate it rejects; nothing was rejected. Close it and click Reject on the gate again."


def register(app: App, deps: SlackDeps) -> None:
    def approve(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        # The message changes first, so the outbox's rewrite with the decision always comes after it; a refused click
        # gets the message back as it was.
        now_running(deps.client, body, f":hourglass_flowing_sand: Approved by <@{user}>: the next step is starting; "
                                       "the progress message in this thread follows it.")
        answer = guard(lambda: actions.decide(deps.root, deps.identity(user), value, "approved"),
                       refused(deps.client, body, tell))
        deps.follow(answer, tell, channel)

    def ask_reason(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        seen = guard(lambda: actions.may_decide(deps.ctx, deps.identity(user), value), tell)
        if seen is None:
            return
        message_ts = (body.get("container") or {}).get("message_ts")
        try:
            deps.client.views_open(trigger_id=body["trigger_id"],
                                   view=reject_modal(value or "", seen.gate, seen.deployment_id, channel, message_ts))
        except SlackApiError as exc:
            # A trigger lives 3 seconds; a slow queue can outlive it. Nothing was decided: say so.
            log.warning("views.open failed for a Reject click: %s", exc.response.get("error"))
            tell(reply(f"Slack could not open the reason form ({exc.response.get('error')}); nothing was rejected. "
                       "Click Reject again."))

    def ask_override(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        seen = guard(lambda: actions.may_decide(deps.ctx, deps.identity(user), value), tell)
        if seen is None:
            return
        message_ts = (body.get("container") or {}).get("message_ts")
        try:
            deps.client.views_open(trigger_id=body["trigger_id"],
                                   view=override_modal(value or "", seen.deployment_id, channel, message_ts))
        except SlackApiError as exc:
            log.warning("views.open failed for an override click: %s", exc.response.get("error"))
            tell(reply(f"Slack could not open the reason form ({exc.response.get('error')}); nothing was approved. "
                       "Click again."))

    def recheck(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        now_running(deps.client, body, f":hourglass_flowing_sand: <@{user}> is re-running these checks; "
                                       "the new report follows in this thread.")
        answer = guard(lambda: actions.recheck(deps.root, deps.identity(user), value), refused(deps.client, body, tell))
        deps.follow(answer, tell, channel)

    def accept_limits(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        answer = guard(lambda: actions.accept_limits(deps.ctx, deps.identity(user), value), tell)
        deps.follow(answer, tell, channel)

    def ack_reason(ack: Ack, view: dict[str, Any]) -> None:
        if metadata(view) is None:
            ack(response_action="errors", errors={"reason": LOST_TICKET})
            return
        if not reason(view):
            ack(response_action="errors", errors={"reason": "Say why the gate is rejected."})
            return
        ack()

    def reject(body: dict[str, Any], view: dict[str, Any]) -> None:
        why, meta = reason(view), metadata(view)
        if not why or meta is None:
            return  # refused in the acknowledgement
        channel = meta.get("channel") if isinstance(meta.get("channel"), str) else None
        user = body["user"]["id"]
        tell = clicker(deps.client, user, channel, None)
        answer = guard(lambda: actions.decide(deps.root, deps.identity(user), meta.get("ticket"), "rejected", why), tell)
        deps.follow(answer, tell, channel)

    def ack_override(ack: Ack, view: dict[str, Any]) -> None:
        if not reason(view):
            ack(response_action="errors", errors={"reason": "Say why the endpoint may go live above its measured limits."})
            return
        ack()

    def approve_above(body: dict[str, Any], view: dict[str, Any]) -> None:
        why = reason(view)
        if not why:
            return
        meta = json.loads(view.get("private_metadata") or "{}")
        user, channel = body["user"]["id"], meta.get("channel")
        tell = clicker(deps.client, user, channel, None)
        answer = guard(lambda: actions.decide(deps.root, deps.identity(user), meta.get("ticket"), "approved",
                                              override_reason=why), tell)
        deps.follow(answer, tell, channel)

    def show_checks(body: dict[str, Any], respond: Respond) -> None:
        user, channel, value = click(body)
        tell = clicker(deps.client, user, channel, respond)
        answer = guard(lambda: actions.show_checks(deps.ctx, deps.identity(user), value), tell)
        if answer is not None:
            tell(answer)

    app.action(SHOW_CHECKS)(ack=ack_now, lazy=[show_checks])
    app.action(APPROVE)(ack=ack_now, lazy=[approve])
    app.action(APPROVE_ABOVE_LIMITS)(ack=ack_now, lazy=[ask_override])
    app.view(OVERRIDE_MODAL)(ack=ack_override, lazy=[approve_above])
    app.action(RECHECK)(ack=ack_now, lazy=[recheck])
    app.action(ACCEPT_LIMITS)(ack=ack_now, lazy=[accept_limits])
    app.action(REJECT)(ack=ack_now, lazy=[ask_reason])
    app.view(REJECT_MODAL)(ack=ack_reason, lazy=[reject])
