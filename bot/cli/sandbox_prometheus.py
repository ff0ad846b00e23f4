"""``kimi-ops sandbox --prometheus``: the sandbox's console, its pages after go-live from a real Prometheus and
Alertmanager (:mod:`bot.sandbox.prometheus`) instead of the built-in watch.

Both binaries must be on the PATH; without them the command stops with one line saying how to get them. The
endpoint's rules are rendered as ``kimi-ops slo rules`` prints them; Prometheus scrapes the model server every
second, Alertmanager posts to the console's Slack app, and a page shows after the next line typed.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from bot.cli import output

if TYPE_CHECKING:
    from bot.cli.shell import Shell
    from bot.sandbox.stack import Sandbox

Overrides = tuple[dict[str, Any], dict[str, Any]]


def console_with_prometheus(data_dir: Path, start: Callable[[Overrides], tuple[Sandbox, Shell]]) -> None:
    from bot.cli.shell import repl
    from bot.sandbox.prometheus import INSTALL, beside, binaries, free_port, sandbox_overrides

    if binaries() is None:
        output.error(f"--prometheus needs prometheus and alertmanager on the PATH; {INSTALL}")
        raise typer.Exit(2)
    port, token = free_port(), secrets.token_hex(16)
    stack, console = start(sandbox_overrides(port, token))
    try:
        prometheus, http = beside(stack.ctx, console.app, data_dir / "prometheus", alertmanager_port=port, token=token)
    except BaseException:
        console.close()
        stack.stop()
        raise
    typer.echo(f"Prometheus {prometheus.prometheus_url} (rules: kimi-ops slo rules ENDPOINT) and Alertmanager "
               f"{prometheus.alertmanager_url} watch the endpoint; their pages reach this console through "
               f"{http.url}/alertmanager/webhook (shown after your next line).")
    try:
        repl(console)  # closes the console
    finally:
        prometheus.stop()
        http.stop()
        stack.stop()
