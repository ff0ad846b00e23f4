"""Shared plumbing for CLI commands: the context and the acting identity."""

from __future__ import annotations

import getpass

from bot.bootstrap import Context, build_context


def context() -> Context:
    """The CLI's context: settings from the environment, production adapters."""
    return build_context(connect=True)


def default_actor() -> str:
    """CLI identity: ``cli:<login>`` unless ``--as`` names a Slack user ID."""
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no login name in some containers
        return "cli:unknown"
