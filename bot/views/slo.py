"""How ``/kimi slo`` and ``kimi-ops slo`` show an endpoint's objectives: bounds, burn rates, budget left."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from bot.domain.chat_text import literal
from bot.domain.slo import Burn
from bot.views.parts import Heading, Note, Part, Table, Text
from bot.views.tables import text_table

WINDOWS = (dt.timedelta(minutes=5), dt.timedelta(hours=1), dt.timedelta(hours=6), dt.timedelta(days=1),
           dt.timedelta(days=3))
WINDOW_NAMES = ("5m", "1h", "6h", "1d", "3d")


def burn_rows(burns: Sequence[Burn]) -> tuple[list[str], list[list[str]]]:
    header = ["objective", *[f"burn {w}" for w in WINDOW_NAMES], "budget left", "alert"]
    rows = []
    for burn in burns:
        rates = [f"{r:.1f}×" if (r := burn.rates.get(w)) is not None else "–" for w in WINDOWS]
        left = f"{burn.budget_left:.0%}" if burn.budget_left is not None else "–"
        alert = "page" if burn.page else "warn" if burn.warn else ""
        rows.append([burn.objective.words, *rates, left, alert])
    return header, rows


def slo_parts(endpoint: str, window_days: float, burns: Sequence[Burn], incidents: Sequence[tuple[str, str, dt.datetime]],
              last_sample: dt.datetime | None) -> list[Part]:
    header, rows = burn_rows(burns)
    parts: list[Part] = [Heading(f"{endpoint}: objectives over {window_days:g} days")]
    if last_sample is None:
        parts.append(Text("The metrics watch has no reading of this endpoint yet (it reads live endpoints every minute)."))
        return parts
    parts.append(Table("burn rate per window (1× spends the budget exactly over the window) and budget left",
                       text_table(header, rows), what="objectives"))
    for kind, reason, opened in incidents:
        parts.append(Text(f"*{kind}* since {opened:%Y-%m-%d %H:%M} UTC — {literal(reason)}"))
    parts.append(Note(f"last reading {last_sample:%Y-%m-%d %H:%M} UTC"))
    return parts
