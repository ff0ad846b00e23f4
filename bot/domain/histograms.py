"""PromQL's ``histogram_quantile`` over cumulative buckets (pure), shared by the metrics reader and the ramp."""

from __future__ import annotations

import math
from collections.abc import Iterable


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """PromQL's ``histogram_quantile`` over cumulative ``(upper bound, count)`` buckets.

    Returns None when there are no observations or no ``+Inf`` bucket. A rank
    that falls in the ``+Inf`` bucket yields the highest finite upper bound.
    """
    ordered = sorted(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    # Counts must not fall with the bound; a scrape racing an update can break that, as Prometheus notes.
    fixed: list[tuple[float, float]] = []
    for bound, count in ordered:
        fixed.append((bound, max(count, fixed[-1][1]) if fixed else count))
    total = fixed[-1][1]
    if total <= 0:
        return None
    rank = q * total
    below_bound, below_count = 0.0, 0.0
    for index, (bound, count) in enumerate(fixed):
        if count >= rank:
            if math.isinf(bound):
                return fixed[-2][0]
            if index == 0 and bound <= 0:
                return bound
            in_bucket = count - below_count
            if in_bucket <= 0:
                return bound
            return below_bound + (bound - below_bound) * (rank - below_count) / in_bucket
        below_bound, below_count = bound, count
    return fixed[-2][0]
