"""Status rows from the cluster: what runs, what users get, the limits applied, accepted-not-applied ones, drift.

Chat-neutral ``(field, value)`` pairs that ``/kimi status``, the App Home and
``kimi-ops status`` all show, so the three say the same thing in the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.domain.drift import ClusterTruth

UNKNOWN = "unknown — the cluster could not be read in time; below is kimi-ops's record"


def short_image(image: str | None) -> str:
    """``vllm-openai@sha256:0123456789ab``: the repository's last part and the digest's first 12 hex digits."""
    if not image:
        return "none"
    name, _, digest = image.rpartition("@")
    if not name:
        return image.rsplit("/", 1)[-1]
    return f"{name.rsplit('/', 1)[-1]}@{digest[:19]}"


def limits_text(limits: Mapping[str, Any] | None) -> str:
    if not limits:
        return "none found"
    text = f"{limits.get('max_concurrent_requests', '?')} concurrent, queue {limits.get('max_queue_size', '?')}"
    overflow = limits.get("overflow_status_code")
    return text + (f", overflow {overflow}" if overflow is not None else "")


def runs_text(truth: ClusterTruth) -> str:
    observed = truth.observed
    if observed is None:
        recorded = truth.recorded
        if recorded.release is None:
            return f"{UNKNOWN} (nothing recorded)"
        return f"{UNKNOWN}: {recorded.release} (tuple {str(recorded.release_hash)[:12]}) · image {short_image(recorded.image)}"
    if observed.release is None and observed.image is None:
        return "nothing: no Kimi K3 workload object on the cluster"
    where = f" · {observed.workload}" if observed.workload else ""
    return (f"{observed.release or 'an unlabelled release'} (tuple {str(observed.release_hash)[:12]}) · "
            f"image {short_image(observed.image)}{where}")


def users_text(truth: ClusterTruth) -> str:
    observed = truth.observed
    held = f" — {truth.on_fallback}" if truth.on_fallback else ""
    if observed is None:
        return f"unknown (kimi-ops set admission {truth.recorded.admission}){held}"
    verdict = {False: " · its gateway has not accepted the route", None: ""}.get(observed.route_accepted, "")
    if observed.route is not None and observed.route_accepted is None:
        verdict = " · no gateway has reported on the route's current version yet"
    return f"{observed.admission or 'no route'} — {truth.users_get}{verdict}{held}"


def cluster_rows(truth: ClusterTruth | None, *, configured: Mapping[str, Any], accepted_source: bool) -> list[tuple[str, str]]:
    """The rows of one endpoint; ``configured`` (the effective settings) stands in when no limits can be read.

    ``accepted_source`` says the settings' limits came from a traffic gate's proposal.
    """
    origin = " (accepted from a traffic gate)" if accepted_source else ""
    if truth is None:
        return [("limits", limits_text(configured) + origin)]
    rows = [("cluster runs", runs_text(truth)), ("users get", users_text(truth))]
    applied = truth.applied_limits
    if applied is not None:
        same_as_settings = all(applied.get(k) == configured.get(k) for k in ("max_concurrent_requests", "max_queue_size"))
        source = "" if truth.known else " (kimi-ops's record)"
        rows.append(("limits applied", limits_text(applied) + source + (origin if same_as_settings else "")))
    elif truth.known:
        rows.append(("limits applied", "none: nothing runs"))
    else:
        rows.append(("limits", limits_text(configured) + origin + " (kimi-ops's settings; not read from the cluster)"))
    if truth.accepted_limits is not None:
        rows.append(("accepted, not applied", limits_text(truth.accepted_limits)
                     + " — they apply with the next manifest rendered for this endpoint"))
    if truth.known:
        rows += [("drift", d.words) for d in truth.drift] or [("drift", "none: the cluster matches kimi-ops's record")]
    return rows
