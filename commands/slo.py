"""``/kimi slo [ENDPOINT]``: each objective's bound, burn rates over the alert windows, budget left, open alerts.

Naming one endpoint (or having only one) also posts a PNG of its last hours to the endpoint's channel.
"""

from __future__ import annotations

from bot.bootstrap import Root
from bot.services.access import Identity, authorize
from bot.services.metrics_watch import share_plot, slo_view
from bot.views.parts import Note, Part, Reply, plain
from bot.views.slo import slo_parts
from commands.base import Usage, extra

NAME = "slo"
USAGE = "/kimi slo [ENDPOINT]"
HELP = "Show an endpoint's service objectives: burn rates over the alert windows, error budget left, open alerts."


def parse(args: list[str]) -> str | None:
    if len(args) > 1:
        raise Usage(USAGE, extra(args[1:]) + " (one endpoint, or none for all)")
    return args[0] if args else None


def run(root: Root, identity: Identity, name: str | None) -> Reply:
    ctx = root.ctx
    authorize(ctx, identity, "view", f"endpoint:{name or '*'}")
    names = [name] if name else [e.name for e in ctx.settings.endpoints]
    if not names:
        return Reply(parts=(Note("no endpoints declared"),), text="no endpoints declared")
    parts: list[Part] = []
    plot_dir = ctx.settings.data_dir / "plots" if len(names) == 1 else None
    for each in names:
        view = slo_view(ctx, each, plot_dir=plot_dir)
        parts += slo_parts(view.endpoint, view.window_days, view.burns, view.open_incidents, view.last_sample)
        if share_plot(ctx, view, None):
            parts.append(Note("a plot of the last hours follows in the endpoint's channel"))
    return Reply(parts=tuple(parts), text=plain(parts))
