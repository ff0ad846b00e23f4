"""``kimi-ops slo rules NAME``: the Prometheus rules of an endpoint or a pair service, as kimi-ops renders them.

``--as prometheusrule`` (default) prints the Prometheus Operator object kimi-ops applies for an endpoint with
``slo.alerting: prometheus``; ``--as rules-file`` the same groups as a plain Prometheus rules file
(``promtool check rules`` reads either's groups; docs/alerting.md).
"""

from __future__ import annotations

from enum import StrEnum

import typer

from bot.cli.common import context


class RulesForm(StrEnum):
    PROMETHEUSRULE = "prometheusrule"
    RULES_FILE = "rules-file"


RULES_FORM_OPTION = typer.Option(RulesForm.PROMETHEUSRULE, "--as",
                                 help="With `rules`: the PrometheusRule object or a plain rules file.")


def print_rules(name: str | None, form: RulesForm) -> None:
    from bot.domain.alert_rules import rules_yaml
    from bot.services.alert_rules import render_rules
    from bot.services.errors import Invalid

    if not name:
        raise Invalid("say whose rules to print: `kimi-ops slo rules ENDPOINT` (or a service's name)")
    rendered = render_rules(context(), name)
    document = rendered.rule_object if form is RulesForm.PROMETHEUSRULE else rendered.rules_file
    typer.echo(rules_yaml(document), nl=False)
