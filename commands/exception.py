"""``/kimi exception add ID kind=KIND release=NAME|endpoint=NAME [expires=YYYY-MM-DD] [reason=TEXT…]`` (approvers).

Records a reviewed security exception, as ``kimi-ops exception add`` does: the same
service, so the same rules (the approver role, not the requester of a deployment it
unblocks, a known release or endpoint, a new id, an expiry within a year) and the same
audit. Typed without its reason or expiry, the command is first checked as far as it
goes, then opens a form asking for both; the form's answers complete the parsed command
(:func:`complete`), which then runs as if written out in full.
``reason=`` takes the rest of the line, so it needs no quotes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from bot.bootstrap import Root
from bot.domain.governance import EXCEPTION_KINDS
from bot.services.access import Identity
from bot.services.governance import ExceptionRequest, may_record_exception, record_exception
from bot.views.parts import CommandForm, Reply, Text, person, reply
from commands.base import Usage, q

NAME = "exception"
USAGE = ("/kimi exception add ID kind=KIND release=NAME|endpoint=NAME [expires=YYYY-MM-DD] [reason=TEXT…] "
         f"(KIND: {'|'.join(EXCEPTION_KINDS)})")
HELP = ("Record a reviewed security exception for a release or an endpoint (approvers); without `reason=` or "
        "`expires=` a form asks for them.")
KEYS = ("kind", "release", "endpoint", "expires", "reason")


@dataclass(frozen=True)
class AddException:
    id: str
    kind: str
    scope: str
    target: str
    expires: dt.date | None
    reason: str | None

    def command(self) -> str:
        """The command's text without its reason and expiry (what the form completes)."""
        return f"{NAME} add {self.id} kind={self.kind} {self.scope}={self.target}"


def parse(args: list[str]) -> AddException:
    if not args or args[0].lower() != "add":
        raise Usage(USAGE, "say `add`, the exception's id and its `key=value` pairs (`/kimi exceptions` lists them)")
    if len(args) < 2 or "=" in args[1]:
        raise Usage(USAGE, "name the exception's id after `add`, e.g. SEC-EXC-2026-0142")
    pairs: dict[str, str] = {}
    words = args[2:]
    for index, word in enumerate(words):
        key, sep, value = word.partition("=")
        key = key.lower()
        if not sep or key not in KEYS:
            raise Usage(USAGE, f"{q(word)} is not one of {', '.join(f'`{k}=…`' for k in KEYS)}")
        if key in pairs:
            raise Usage(USAGE, f"`{key}=` is given twice")
        if key == "reason":  # the rest of the line, as typed
            pairs[key] = " ".join([value, *words[index + 1:]]).strip()
            break
        pairs[key] = value.strip()
    kind = pairs.get("kind", "").lower()
    if kind not in EXCEPTION_KINDS:
        raise Usage(USAGE, f"`kind=` must be one of {', '.join(EXCEPTION_KINDS)}" + (f", not {q(kind)}" if kind else ""))
    scopes = [k for k in ("release", "endpoint") if pairs.get(k)]
    if len(scopes) != 1:
        raise Usage(USAGE, "scope it to one release (`release=NAME`) or one endpoint (`endpoint=NAME`)")
    expires = None
    if "expires" in pairs:
        try:
            expires = dt.date.fromisoformat(pairs["expires"])
        except ValueError:
            raise Usage(USAGE, f"`expires=` takes a date, YYYY-MM-DD, not {q(pairs['expires'])}") from None
    scope = scopes[0]
    target = pairs[scope] if scope == "release" else pairs[scope].lower()
    return AddException(id=args[1], kind=kind, scope=scope, target=target, expires=expires,
                        reason=pairs.get("reason") or None)


def complete(parsed: AddException, reason: str, expires: str) -> AddException:
    """The command with the form's answers (the reason as typed, newlines and quotes included)."""
    try:
        day = dt.date.fromisoformat(expires.strip())
    except ValueError:
        raise Usage(USAGE, f"the expiry is a date, YYYY-MM-DD, not {q(expires)}") from None
    return replace(parsed, reason=reason.strip() or None, expires=day)


def opens_form(parsed: AddException) -> bool:
    """Typed without its reason or expiry: :func:`run` answers with a form asking for them."""
    return parsed.reason is None or parsed.expires is None


def run(root: Root, identity: Identity, parsed: AddException) -> Reply:
    if parsed.reason is None or parsed.expires is None:
        may_record_exception(root.ctx, identity, parsed.id, parsed.kind, parsed.scope, parsed.target)
        form = CommandForm(
            title="Security exception",
            question=f"Record security exception *{parsed.id}* ({parsed.kind}) for {parsed.scope} *{parsed.target}*? "
                     "Say why the rule may be broken here and until when; it is audited under your name.",
            command=parsed.command(),
            expires=parsed.expires.isoformat() if parsed.expires else None,
        )
        text = f"Add `expires=YYYY-MM-DD reason=…` to the command to record {parsed.id}."
        return Reply(parts=(Text(text),), text=text, form=form)
    stored = record_exception(root.ctx, identity, ExceptionRequest(
        id=parsed.id, kind=parsed.kind, scope=parsed.scope, target=parsed.target, reason=parsed.reason,
        expires_at=dt.datetime.combine(parsed.expires, dt.time.max, tzinfo=dt.UTC),
    ))
    return reply(f"Security exception *{stored.id}* ({stored.kind}) recorded for {stored.scope} *{stored.target}* "
                 f"until {stored.expires_at:%Y-%m-%d}, by {person(stored.reviewer)}.")
