"""Who may do what: one fail-closed filter in front of every state change.

Roles come from settings (``roles:`` in the ``KIMI_CONFIG`` file): lists of Slack
user IDs and user-group IDs. The CLI uses the same identities (``--as U…`` or
``KIMI_CLI_USER``), its groups read from Slack by :func:`identify` when a bot token
is configured. Anything not explicitly allowed is refused, and every refusal
is written to the audit log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.services.context import Context
from bot.services.errors import Forbidden

# The role each action needs; an action missing here is refused (fail closed).
REQUIRED_ROLE: dict[str, str] = {
    "view": "viewer",
    "register": "deployer",
    "deploy": "deployer",
    "rollback": "deployer",
    "cancel": "deployer",
    "recheck": "deployer",
    "resume": "deployer",
    "decide": "approver",
    "accept_limits": "approver",
    "break_lock": "admin",
    "admission": "admin",
    "drain": "approver",
    "review": "approver",
    "incident": "deployer",  # acknowledge or silence a metrics-watch incident (the on-call people deploy)
    "drill": "deployer",  # ask for an availability drill
    "approve_drill": "approver",  # approve or reject someone else's drill
}

# What each action is, in the words of a refusal ("you need the approver role to approve or reject gates").
ACTION_WORDS: dict[str, str] = {
    "view": "see endpoints and deployments",
    "register": "register releases",
    "deploy": "deploy",
    "rollback": "roll back",
    "cancel": "cancel deployments",
    "recheck": "re-run a gate's checks",
    "resume": "resume deployments",
    "decide": "approve or reject gates",
    "accept_limits": "accept proposed request limits",
    "break_lock": "break a stuck deployment's hold on its endpoint",
    "admission": "open or close an endpoint to users by hand",
    "drain": "answer a stalled drain",
    "drill": "ask for availability drills",
    "approve_drill": "approve or reject availability drills",
}


def subject_words(subject: str) -> str:
    """``deployment:5`` → ``deployment #5``, ``endpoint:kimi-prod`` → ``kimi-prod``; ``endpoint:*`` says nothing."""
    kind, _, name = subject.partition(":")
    if not name or name == "*":
        return ""
    return f"{kind} #{name}" if kind in ("deployment", "drill") else name


# A role includes the roles listed for it.
IMPLIES: dict[str, frozenset[str]] = {
    "viewer": frozenset({"viewer"}),
    "deployer": frozenset({"deployer", "viewer"}),
    "approver": frozenset({"approver", "viewer"}),
    "admin": frozenset({"admin", "approver", "deployer", "viewer"}),
}


@dataclass(frozen=True)
class Identity:
    """An acting person: a Slack user ID and the user groups they belong to."""

    user_id: str
    groups: frozenset[str] = field(default_factory=frozenset)

    def __str__(self) -> str:
        return self.user_id


def identify(ctx: Context, user_id: str) -> Identity:
    """The person behind a Slack user ID, with the user groups the process's directory knows.

    Without a directory (no Slack bot token) groups are unknown: roles granted only
    through a group are then refused, never assumed.
    """
    directory = ctx.ports.directory
    return Identity(user_id, directory.groups_of(user_id) if directory is not None else frozenset())


def roles_of(ctx: Context, identity: Identity) -> frozenset[str]:
    ids = {identity.user_id, *identity.groups}
    granted: set[str] = set()
    roles = ctx.settings.roles
    for role in ("viewer", "deployer", "approver", "admin"):
        if ids & set(getattr(roles, role)):
            granted |= IMPLIES[role]
    return frozenset(granted)


def is_allowed(ctx: Context, identity: Identity, action: str) -> bool:
    needed = REQUIRED_ROLE.get(action)
    return needed is not None and needed in roles_of(ctx, identity)


def authorize(ctx: Context, identity: Identity, action: str, subject: str) -> None:
    """Raise :class:`Forbidden` (and audit the refusal) unless ``identity`` may do ``action``."""
    if is_allowed(ctx, identity, action):
        return
    needed = REQUIRED_ROLE.get(action, "an unknown role")
    with ctx.uow() as uow:
        uow.audit.record(
            at=ctx.clock.now(),
            actor=identity.user_id,
            action="access.refused",
            subject=subject,
            details={"wanted": action, "needs": needed, "groups": sorted(identity.groups)},
        )
        uow.commit()
    where = subject_words(subject)
    doing = ACTION_WORDS.get(action, action.replace("_", " ")) + (f" ({where})" if where else "")
    raise Forbidden(f"you need the {needed} role to {doing}; ask a kimi-ops admin for it")


def refuse_foreign_request(ctx: Context, *, user: str | None, kind: str, why: str, origin: dict[str, str | None]) -> None:
    """Audit a signed Slack request refused because it came from another workspace, organisation or app.

    ``origin`` is what the request said about itself (team, enterprise and app IDs); nothing else of it is kept.
    """
    with ctx.uow() as uow:
        uow.audit.record(
            at=ctx.clock.now(),
            actor=user or "slack",
            action="slack.request_refused",
            subject="slack:" + (origin.get("team") or origin.get("enterprise") or "unknown"),
            details={"kind": kind, "why": why, **origin},
        )
        uow.commit()
