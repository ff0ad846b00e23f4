"""``kimi-ops slo``: ``[show] [ENDPOINT]`` the objectives as the built-in watch reads them, ``rules NAME`` the
Prometheus rules of an endpoint, or a pair service's own (its burn rates over both sides), as kimi-ops renders them.

``rules --as prometheusrule`` (default) prints the Prometheus Operator object kimi-ops applies for an endpoint
with ``slo.alerting: prometheus``; ``--as rules-file`` the same groups as a plain Prometheus rules file
(docs/alerting.md). A comment above the rules says whether kimi-ops applies them and, if not, who pages instead
(a pair service's own rules are applied only when both sides have ``slo.alerting: prometheus``). ``show`` is the
group's default, so ``kimi-ops slo kimi-prod`` reads as it always did.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

import typer
from typer.core import TyperGroup

from bot.cli.common import context
from bot.cli.conventions import typer_app
from bot.cli.guard import run_guarded


class RulesForm(StrEnum):
    PROMETHEUSRULE = "prometheusrule"
    RULES_FILE = "rules-file"


class DefaultShow(TyperGroup):
    """A group whose first word may be its default command's argument: ``slo kimi-prod`` is ``slo show kimi-prod``."""

    default_command = "show"

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer vendors its click: its Context
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


def rules(name: str = typer.Argument(..., metavar="NAME",
                                     help="The endpoint, or a pair service (its own rules over both sides)."),
          form: RulesForm = typer.Option(RulesForm.PROMETHEUSRULE, "--as",
                                         help="The PrometheusRule object, or a plain Prometheus rules file.")) -> None:
    """The Prometheus rules of an endpoint (burn rates and direct pages) or a pair service (its burn rates)."""
    import textwrap

    from bot.domain.alert_rules import rules_yaml
    from bot.services.alert_rules import render_rules, rules_note

    def body() -> None:
        ctx = context()
        rendered = render_rules(ctx, name)
        document = rendered.rule_object if form is RulesForm.PROMETHEUSRULE else rendered.rules_file
        note = "".join(f"# {line}\n" for line in textwrap.wrap(rules_note(ctx, rendered.name), 110,
                                                                                break_on_hyphens=False))
        typer.echo(note + rules_yaml(document), nl=False)

    run_guarded(body)


def slo_app(show: Callable[..., Any]) -> typer.Typer:
    app = typer_app(cls=DefaultShow,
                    help="Objectives after go-live: `slo [ENDPOINT]` shows them, `slo rules NAME` prints the rules.")
    app.command("show")(show)
    app.command("rules")(rules)
    return app
