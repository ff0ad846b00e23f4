"""Shared plumbing for CLI commands: the context, the process's root and the acting identity."""

from __future__ import annotations

import getpass

from bot.bootstrap import Root, build_context, build_root
from bot.services.context import Context


def context() -> Context:
    """The CLI's context: settings from the environment, production adapters."""
    return build_context(connect=True)


def root() -> Root:
    """The CLI process's root: its context and the one engine that runs the slow steps here."""
    return build_root(context())


def default_actor() -> str:
    """CLI identity: ``cli:<login>`` unless ``--as`` names a Slack user ID."""
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no login name in some containers
        return "cli:unknown"
