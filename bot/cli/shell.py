"""``kimi-ops shell``: the Slack bot in a terminal, through the very same dispatch path.

Like Errbot's text backend or Hubot's shell adapter, but nothing is faked
inside the bot: each line becomes the signed request Slack would send and goes
through :meth:`bot.slack.app.KimiApp.dispatch`; the bot's Web API calls land in the
local Slack stub; what a person would see (channel messages, thread replies,
ephemeral answers, updates in place) is rendered from the same Block Kit as
text. Buttons are numbered: type the number to press one. ``/as U123`` switches
the acting Slack user, to exercise separation of duties. An uploaded file shows
as one line, ``[file traffic-sweep.png, 34 KB]``. Every reply says who sees it
(only you, or everyone); emoji names show as the emoji and Slack dates as Slack
words them (``3 minutes ago``). :meth:`Shell.start_jobs` runs the scheduled jobs
as ``serve`` does, so the watches' readings are real here too.

:class:`Shell` is the testable core (feed lines, collect output); the command
only adds a prompt loop.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from bot.cli.guard import run_guarded
from bot.views.actions import COMMAND_FORM, REJECT

if TYPE_CHECKING:  # the Slack app and the stub load only when a console starts (the CLI starts faster)
    from bot.sandbox.slack_stub import Message
    from bot.scheduler import JobRunner
    from bot.services.context import Context
    from bot.slack.app import KimiApp

HELP = ("Type /kimi COMMAND (e.g. /kimi help), a number to press that button, "
        "/as USER_ID to act as someone else, /quit to leave.")


def mrkdwn_to_text(text: str, now: dt.datetime | None = None) -> str:
    """Slack's markup as a person sees it in Slack (:mod:`bot.sandbox.slack_text`): emoji, names, dates in words."""
    from bot.sandbox.slack_text import as_slack_shows

    return as_slack_shows(text, now)


def render_blocks(blocks: list[dict[str, Any]], fallback: str, number: Callable[[dict[str, Any]], int],
                  now: dt.datetime | None = None) -> list[str]:
    """Block Kit as console lines; buttons get the numbers ``number`` assigns; ``now`` reads Slack dates."""
    def text_of(mrkdwn: str) -> str:
        return mrkdwn_to_text(mrkdwn, now)

    if not blocks:
        return [text_of(fallback)]
    lines: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            lines.append(f"== {block['text']['text']} ==")
        elif kind == "section":
            lines.extend(text_of(block["text"]["text"]).split("\n"))
        elif kind == "context":
            lines.append("  (" + " ".join(text_of(e.get("text", "")) for e in block.get("elements", [])) + ")")
        elif kind == "divider":
            lines.append("-" * 40)
        elif kind == "actions":
            lines.append("  " + "  ".join(f"[{number(e)}] {e['text']['text']}" for e in block.get("elements", [])))
    return lines


def file_line(file: dict[str, Any]) -> str:
    """One shared file as a console line: its name and size (a terminal cannot show the image)."""
    size = int(file.get("size") or 0)
    shown = f"{max(1, round(size / 1024))} KB" if size >= 1024 else f"{size} B"
    return f"[file {file.get('name') or file.get('title') or file.get('id')}, {shown}]"


class Shell:
    """Feeds lines to the Slack app as a given user and returns what that user would see, as text."""

    def __init__(self, ctx: Context, *, user: str, channel: str = "C0SHELL", groups: dict[str, list[str]] | None = None) -> None:
        from bot.bootstrap import build_root
        from bot.sandbox.slack_stub import SlackSender, SlackStub
        from bot.slack.app import create_app

        self.ctx = ctx
        self.user = user
        self.channel = channel
        self.stub = SlackStub(groups=groups).start()
        ctx.settings.slack_api_url = self.stub.api_url
        secret = secrets.token_hex(16)
        # Delivery follows each request here, so what a line caused is printed right after it.
        root = build_root(ctx, slack_token="xoxb-local-shell")
        if root.notifier is not None:
            # The console prints what a line caused right after it: each event's progress is shown, not coalesced.
            root.notifier.thread.progress_every = 0
        self.app: KimiApp = create_app(root, signing_secret=secret, outbox_seconds=None)
        self.sender = SlackSender(secret, self.stub)
        self.buttons: list[tuple[Message, dict[str, Any]]] = []
        self._shown: dict[tuple[str, str], int] = {}
        self._awaiting_reason: dict[str, Any] | None = None
        self._views_seen = 0
        self.jobs: JobRunner | None = None

    def start_jobs(self) -> None:
        """Run the scheduled jobs here as ``serve`` does (reservation watch, readiness probe, metrics watch, …), on
        this console's clock: what ``/kimi slo``, ``/kimi reservations`` and ``status`` read is then real here too."""
        from bot.scheduler import JobRunner

        self.jobs = JobRunner(self.app.root)
        self.jobs.start()

    def close(self) -> None:
        if self.jobs is not None:
            self.jobs.stop()
        self.app.close()
        self.stub.stop()

    # ------------------------------------------------------------------ input
    def handle(self, line: str) -> list[str]:
        """One line typed by the person; returns the lines to print."""
        line = line.strip()
        if self._awaiting_reason is not None:
            view, self._awaiting_reason = self._awaiting_reason, None
            if view.get("callback_id") == COMMAND_FORM:  # a command's form: the date, then the reason
                day, _, why = line.partition(" ")
                return self._send(self.sender.submit(self.user, view, {"expires": {"expires": day},
                                                                       "reason": {"reason": why}}))
            return self._send(self.sender.submit(self.user, view, {"reason": {"reason": line}}))
        if not line:
            return []
        if line in ("/help", "help", "?"):
            return [HELP]
        if line.startswith("/as"):
            parts = line.split()
            if len(parts) != 2 or not re.fullmatch(r"[UW][A-Z0-9]+", parts[1]):
                return ["usage: /as U123ABC (a Slack user ID)"]
            self.user = parts[1]
            return [f"now acting as {self.user}"]
        if line.isdigit():
            return self._press(int(line))
        if line.startswith("/kimi"):
            out = self._send(self.sender.slash(self.user, line[len("/kimi"):].strip(), self.channel))
            if self._new_view():
                out.append("Last day it holds (YYYY-MM-DD), then the reason, on one line:")
            return out
        return [f"not understood: {line!r}. {HELP}"]

    def _press(self, number: int) -> list[str]:
        if not 1 <= number <= len(self.buttons):
            return [f"no button [{number}]; buttons are numbered in the messages above"]
        message, element = self.buttons[number - 1]
        out = self._send(self.sender.click(self.user, message, element["action_id"], element.get("value", "")))
        if self._new_view():  # Reject, Approve above the limits…, Silence…: the form asks why
            title = str(((self._awaiting_reason or {}).get("title") or {}).get("text") or "")
            out.append("Reason for rejecting (one line):" if element["action_id"] == REJECT
                       else f"{title or 'Reason'}: why (one line):")
        return out

    def _new_view(self) -> bool:
        """Whether the app opened a form since the last look; its answer is then the next line typed."""
        opened = self.stub.calls_to("views.open")
        if len(opened) <= self._views_seen:
            return False
        self._views_seen = len(opened)
        self._awaiting_reason = opened[-1].params["view"]
        return True

    def _send(self, body: str) -> list[str]:
        response = self.app.dispatch(body.encode(), self.sender.headers(body))
        out: list[str] = []
        if response.status != 200:
            out.append(f"(Slack would have been answered HTTP {response.status})")
        elif response.body:
            out += _ack_lines(response.body)
        self.app.wait_idle()
        self.app.deliver()  # what the scheduled jobs wrote meanwhile (alerts, readings) shows with this answer
        return out + self.new_output()

    # ------------------------------------------------------------------ output
    def _number(self, message: Message) -> Callable[[dict[str, Any]], int]:
        def number(element: dict[str, Any]) -> int:
            self.buttons.append((message, element))
            return len(self.buttons)

        return number

    def _edits_between(self, key: tuple[str, str], shown: int, now: int) -> list[dict[str, Any]]:
        """The ``chat.update`` calls of message ``key`` after the version shown (its ``shown``-th) and before ``now``."""
        edits = [c.params for c in self.stub.calls_to("chat.update") if (c.params.get("channel"), c.params.get("ts")) == key]
        return edits[shown:now - 1]

    def new_output(self) -> list[str]:
        """Messages this user can see that are new or changed since last time."""
        out: list[str] = []
        now = self.ctx.clock.now()
        for m in list(self.stub.messages):
            key = (m.channel, m.ts)
            if self._shown.get(key) == m.updated:
                continue
            if m.ephemeral_to not in (None, self.user, "requester"):
                continue
            first = key not in self._shown
            shown = self._shown.get(key, m.updated)
            self._shown[key] = m.updated
            # Every reply says who sees it, as Slack shows it: only you, or everyone in the channel or thread.
            if m.ephemeral_to is not None:
                where = "only you see"
            elif m.thread_ts:
                where = f"thread {m.thread_ts} · everyone sees"
            else:
                where = f"#{m.channel} {m.ts} · everyone sees"
            if not first:
                # Edits made since this console last looked (a progress message moves on several steps between two
                # commands): each as it read, so the console tells the story a person watching Slack would have seen.
                for edit in self._edits_between(key, shown, m.updated):
                    out.append(f"[{where}] (updated)")
                    out += ["  " + line for line in render_blocks(edit.get("blocks") or [], str(edit.get("text") or ""),
                                                                    lambda _element: 0, now)]
            out.append(f"[{where}]" + ("" if first else " (updated)"))
            if m.blocks or m.text or not m.files:
                out += ["  " + line for line in render_blocks(m.blocks, m.text, self._number(m), now)]
            out += ["  " + file_line(f) for f in m.files]
        return out


def _ack_lines(body: str) -> list[str]:
    import json

    try:
        data = json.loads(body)
    except ValueError:
        return [body]
    if data.get("text"):
        return ["[only you see]", "  " + mrkdwn_to_text(data["text"], dt.datetime.now(dt.UTC))]
    if data.get("response_action") == "errors":
        return ["  " + "; ".join(data.get("errors", {}).values())]
    return []


def shell(
    user: str = typer.Option(None, "--as", help="Slack user ID to start as (default: KIMI_CLI_USER)."),
    channel: str = typer.Option("C0SHELL", "--channel", help="Channel the commands are typed in."),
) -> None:
    """A local console for the Slack bot: /kimi commands, numbered buttons, /as to switch user."""
    from bot.cli.common import context

    def body() -> None:
        ctx = context()
        repl(Shell(ctx, user=user or ctx.settings.cli_user or "U0LOCAL", channel=channel))

    run_guarded(body)


def repl(console: Shell) -> None:
    """Read lines until /quit or end of input, printing what each caused; closes the console."""
    typer.echo(f"kimi-ops shell — acting as {console.user}. {HELP}")
    try:
        while True:
            try:
                line = input(f"{console.user}> ")
            except EOFError:
                break
            if line.strip() in ("/quit", "/exit"):
                break
            for out in console.handle(line):
                typer.echo(out)
    finally:
        console.close()


def register(app: typer.Typer) -> None:
    app.command("shell")(shell)
