"""Cold start of a rollout, in the guide's parts: image pull, weight transfer, load and graph initialisation, first completion.

Read from what Kubernetes records (pure, over the API's JSON): the kubelet's ``Pulled`` event says how long the
image pull took (``Successfully pulled image "…" in 2m3.5s``); the weight-transfer init container's
``terminated`` state has its start and finish; the serving container's ``running.startedAt`` up to the pod's
``Ready`` condition is vLLM loading the weights onto the GPUs and capturing its graphs; the readiness suite's
first answered completion closes it. A part Kubernetes did not record is ``None`` and said so, never guessed.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|µs|us|ns)")
_PULLED_IN = re.compile(r"\bin ((?:\d+(?:\.\d+)?(?:h|ms|m|s|µs|us|ns))+)")
SCALE = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
PARTS = (("image_pull_s", "image pull"), ("weight_transfer_s", "weight transfer"),
         ("load_s", "load and graph initialisation"), ("first_completion_s", "first completion"))


def go_duration(text: str) -> float | None:
    """Seconds in a Go duration (``2m3.5s``, ``850ms``); None when it is not one."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * SCALE[u] for n, u in parts)


def _time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _span(start: object, end: object) -> float | None:
    a, b = _time(start), _time(end)
    return max(0.0, (b - a).total_seconds()) if a is not None and b is not None else None


@dataclass(frozen=True)
class ColdStart:
    image_pull_s: float | None
    weight_transfer_s: float | None
    load_s: float | None
    first_completion_s: float | None

    @property
    def total_s(self) -> float:
        return sum(v for v in (self.image_pull_s, self.weight_transfer_s, self.load_s, self.first_completion_s) if v)

    def as_dict(self) -> dict[str, float | None]:
        return {key: getattr(self, key) for key, _ in PARTS} | {"total_s": round(self.total_s, 1)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ColdStart:
        def number(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, (int, float)) else None

        return cls(*(number(key) for key, _ in PARTS))

    def words(self) -> str:
        return " · ".join(f"{name} {format_seconds(getattr(self, key))}" for key, name in PARTS) + \
            f" (total {format_seconds(self.total_s)})"


def format_seconds(value: float | None) -> str:
    if value is None:
        return "not recorded"
    if value < 10:
        return f"{value:.1f} s"
    minutes, seconds = divmod(round(value), 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def _image_pull(events: Iterable[Mapping[str, Any]]) -> float | None:
    pulling: object = None
    for event in events:
        if event.get("reason") == "Pulled" and (found := _PULLED_IN.search(str(event.get("message", "")))):
            return go_duration(found.group(1))
        if event.get("reason") == "Pulling":
            pulling = event.get("firstTimestamp") or event.get("eventTime")
        elif event.get("reason") == "Pulled" and pulling is not None:
            return _span(pulling, event.get("lastTimestamp") or event.get("eventTime"))
    return None


def breakdown(pod: Mapping[str, Any], events: Iterable[Mapping[str, Any]], *, container: str,
              first_completion_s: float | None) -> ColdStart:
    """The cold start of ``pod`` (its serving container ``container``) from its status and its events."""
    status = pod.get("status") or {}
    weights: float | None = None
    for init in status.get("initContainerStatuses") or []:
        done = (init.get("state") or {}).get("terminated") or {}
        span = _span(done.get("startedAt"), done.get("finishedAt"))
        if span is not None:
            weights = (weights or 0.0) + span
    serving: Mapping[str, Any] = next((c for c in status.get("containerStatuses") or [] if c.get("name") == container),
                                      {})
    started = ((serving.get("state") or {}).get("running") or {}).get("startedAt")
    ready = next((c.get("lastTransitionTime") for c in status.get("conditions") or []
                  if c.get("type") == "Ready" and c.get("status") == "True"), None)
    return ColdStart(_image_pull(events), weights, _span(started, ready), first_completion_s)
