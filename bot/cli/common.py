"""Shared plumbing for CLI commands: the context, the process's root and the acting identity.

The composition root (and with it SQLAlchemy, Alembic and the adapters) is imported when a command first
needs a context, not when the CLI starts: ``kimi-ops --help`` must not pay for it.
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.bootstrap import Root
    from bot.services.access import Identity
    from bot.services.context import Context


_built: list[Context] = []


def context() -> Context:
    """The CLI's context: settings from the environment, production adapters."""
    from bot.bootstrap import build_context

    ctx = build_context(connect=True)
    _built.append(ctx)
    return ctx


def close_contexts() -> None:
    """Close every context :func:`context` built in this process: its database pool and kept-alive connections.

    A ``kimi-ops`` process never needs this: its exit ends them, and a command that stopped waiting (``--timeout``)
    leaves the engine's thread using its context until then. What runs commands one after another in its own
    process (the tests' in-process runner) calls it after each, or every command leaves its sockets to the collector.
    """
    while _built:
        _built.pop().close()


def root() -> Root:
    """The CLI process's root: its context and the one engine that runs the slow steps here."""
    from bot.bootstrap import build_root

    return build_root(context())


def default_actor() -> str:
    """CLI identity: ``cli:<login>`` unless ``--as`` names a Slack user ID."""
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no login name in some containers
        return "cli:unknown"


def identity(ctx: Context, user: str | None) -> Identity:
    """Whom a command acts as: ``--as USER``, else ``KIMI_CLI_USER``; refused when neither says."""
    from bot.services.access import identify
    from bot.services.errors import Refused

    user = user or ctx.settings.cli_user
    if not user:
        raise Refused("say who you are: --as U123ABC (a Slack user ID) or set KIMI_CLI_USER")
    return identify(ctx, user)
