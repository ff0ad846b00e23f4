"""Arguments and options several CLI modules share: who acts, which deployment, which gate."""

from __future__ import annotations

import typer

AS_OPTION = typer.Option(None, "--as", metavar="USER", help="Slack user ID to act as (default: KIMI_CLI_USER).")
# The gates' names are spelled out (bot.domain.checks.GATES): importing the domain would slow every --help.
GATE_ARGUMENT = typer.Argument(..., metavar="GATE", help="artifact | infrastructure | model | traffic")
DEPLOYMENT_ARGUMENT = typer.Argument(..., metavar="DEPLOYMENT", help="Deployment number.")


def gate_named(name: str) -> str:
    """A gate's name in any case; anything else is a usage error (exit 2) naming the gates, before anything is read."""
    from bot.domain.checks import GATES
    from bot.services.errors import Invalid

    if name.lower() not in GATES:
        raise Invalid(f"no gate named {name}; the gates are {', '.join(GATES)}")
    return name.lower()
