"""How a capacity view reads: the last review, the live mix beside it, and what drifted (``/kimi capacity``, CLI)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.domain.traffic_mix import TrafficMix


def _mix(data: Mapping[str, Any] | None) -> str:
    return TrafficMix.model_validate(data).words() if data else "none known"


def capacity_lines(view: Mapping[str, Any]) -> list[str]:
    """One line each: review, live mix, trace, drift (``view`` is a capacity view's ``as_dict()``)."""
    name = view["endpoint"]
    review = view.get("last_review")
    lines = [f"{name}: max_model_len {view['max_model_len']:,}, accepted limit {view['accepted_limit']} concurrent"]
    if review:
        proposal = review.get("proposal") or {}
        lines.append(f"last capacity review #{review['id']} ({review['kind']}, {review['at'][:16].replace('T', ' ')} UTC, "
                     f"release {review.get('release') or 'none'}): knee {review.get('knee') or 'none'}, proposed "
                     f"{proposal.get('max_concurrent_requests') or 'no limit'}, measured at max_model_len "
                     f"{review['max_model_len']:,}")
        lines.append(f"  production mix it replayed: {_mix(review.get('production_mix'))}")
    else:
        lines.append("no capacity review yet: the next traffic gate makes the first")
    lines.append(f"live mix: {_mix(view.get('live_mix'))}")
    if view.get("trace"):
        lines.append(f"registered trace sha256 {view['trace']['sha256'][:12]}: {_mix(view['trace']['mix'])}")
    drift = view.get("drift")
    if drift:
        lines.append(f"capacity review due: {'; '.join(drift)}; run `kimi-ops capacity {name} --sweep` "
                     "on the idle side of a pair or with admission closed")
    elif drift is not None:
        lines.append("no drift: the live mix is within what the last review measured")
    return lines
