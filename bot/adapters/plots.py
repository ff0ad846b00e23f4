"""PNG plots of gate reports, written where the Slack notifier can upload them.

matplotlib with the Agg backend (no display); each function draws one figure
from plain values, saves it and closes it so a long-running bot does not leak
figures. matplotlib is imported on first use: it takes a second or more to load,
and every ``kimi-ops`` command would otherwise pay for it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display; must be chosen before pyplot loads
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> dict[str, Any]:
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    data = path.read_bytes()
    return {"path": str(path), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "content_type": "image/png"}


def plot_sweep(
    levels: Sequence[dict[str, Any]], knee: int | None, proposal: int | None, path: Path, title: str
) -> dict[str, Any]:
    """Latency (TTFT p99, completion p99) and 429/error rate against concurrency, per prefix mode, knee marked."""
    plt = _pyplot()
    fig, (lat, err) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for mode, style in (("shared", "-"), ("unique", "--")):
        rows = sorted((lv for lv in levels if lv.get("prefix") == mode), key=lambda lv: lv["concurrency"])
        if not rows:
            continue
        xs = [lv["concurrency"] for lv in rows]
        lat.plot(xs, [lv.get("ttft_p99_ms") for lv in rows], style, marker="o", label=f"TTFT p99 ({mode})")
        lat.plot(xs, [lv.get("completion_p99_ms") for lv in rows], style, marker="s", label=f"completion p99 ({mode})")
        err.plot(xs, [100 * (lv.get("reject_rate") or 0) for lv in rows], style, marker="o", label=f"429/503 % ({mode})")
        err.plot(xs, [100 * (lv.get("error_rate") or 0) for lv in rows], style, marker="x", label=f"errors % ({mode})")
    for ax in (lat, err):
        if knee is not None:
            ax.axvline(knee, color="red", linestyle=":", label=f"knee {knee}")
        if proposal is not None:
            ax.axvline(proposal, color="green", linestyle="-.", label=f"proposed limit {proposal}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    lat.set_ylabel("ms")
    err.set_ylabel("% of requests")
    err.set_xlabel("concurrent requests")
    err.set_xscale("log", base=2)
    from matplotlib.ticker import ScalarFormatter

    err.xaxis.set_major_formatter(ScalarFormatter())  # 1, 2, 4 … rather than 2^0, 2^1, 2^2
    lat.set_title(title)
    fig.tight_layout()
    return _save(fig, path)


def plot_evaluation(
    kinds: Sequence[str], current: Sequence[float], production: Sequence[float] | None, path: Path, title: str
) -> dict[str, Any]:
    """Pass rate per kind, this release beside production."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = list(range(len(kinds)))
    width = 0.4 if production is not None else 0.6
    ax.bar(
        [x - (width / 2 if production is not None else 0) for x in xs], [100 * v for v in current], width, label="this release"
    )
    if production is not None:
        ax.bar([x + width / 2 for x in xs], [100 * v for v in production], width, label="production")
    ax.set_xticks(xs, list(kinds), rotation=20, fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("pass rate %")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def plot_slo(rows: Sequence[dict[str, Any]], path: Path, title: str) -> dict[str, Any]:
    """The last hours of one endpoint: each objective's bad share per reading beside its budget, KV cache and queue.

    ``rows`` are readings oldest first: ``at`` (datetime), ``bad`` (objective → bad share or None), ``budget``
    (objective → allowed share), ``kv`` and ``waiting``.
    """
    plt = _pyplot()
    fig, (burn, load) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    times = [r["at"] for r in rows]
    names = sorted({n for r in rows for n in r.get("bad", {})})
    for name in names:
        budget = next((r["budget"][name] for r in rows if name in r.get("budget", {})), None)
        values = [(r["bad"].get(name) / budget) if budget and r["bad"].get(name) is not None else None for r in rows]
        burn.plot(times, values, marker=".", label=name)
    burn.axhline(1, color="grey", linestyle=":", label="burning exactly the budget")
    burn.set_ylabel("burn rate (× budget)")
    burn.legend(fontsize=7, ncol=3)
    load.plot(times, [100 * r["kv"] if r.get("kv") is not None else None for r in rows], label="KV cache %")
    load.plot(times, [r.get("waiting") for r in rows], label="requests waiting")
    load.legend(fontsize=7)
    for ax in (burn, load):
        ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.autofmt_xdate()
    return _save(fig, path)


def plot_ramp(points: Sequence[dict[str, Any]], path: Path, title: str) -> dict[str, Any]:
    """A ramp as it went: each backend's share of the weight per step, and each side's first-token p99 per soak.

    ``points`` are the ramp's messages oldest first: ``at`` (datetime) and ``sides`` (``name``, ``weight``, and from
    the last soak ``ttft_p99_ms``).
    """
    plt = _pyplot()
    fig, (weights, latency) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    times = [p["at"] for p in points]
    names = list(dict.fromkeys(s["name"] for p in points for s in p["sides"]))
    for name in names:
        sides: list[dict[str, Any]] = [next((s for s in p["sides"] if s["name"] == name), {}) for p in points]
        weights.step(times, [s.get("weight") for s in sides], where="post", marker="o", label=name)
        latency.plot(times, [s.get("ttft_p99_ms") for s in sides], marker=".", label=f"{name} TTFT p99")
    weights.set_ylabel("% of the weight")
    weights.set_ylim(-5, 105)
    latency.set_ylabel("ms")
    for ax in (weights, latency):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.autofmt_xdate()
    return _save(fig, path)
