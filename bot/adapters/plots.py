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


# One colour per series in every panel (a prefix mode is the same colour in the latency and the rejection panel);
# the metric is told by the marker and the line. Sizes are read at Slack's preview width (about 360 px).
MODE_COLOURS = {"shared": "#1f77b4", "unique": "#ff7f0e"}
RELEASE_COLOURS = {"this release": "#1f77b4", "production": "#7f7f7f"}
FONT = 11
LABEL_BOX = {"facecolor": "white", "alpha": 0.75, "edgecolor": "none", "pad": 1}


def _style(plt: Any) -> None:
    plt.rcParams.update({"font.size": FONT, "axes.titlesize": FONT + 1, "legend.fontsize": FONT - 2,
                         "xtick.labelsize": FONT - 1, "ytick.labelsize": FONT - 1})


def plot_sweep(
    levels: Sequence[dict[str, Any]], knee: int | None, proposal: int | None, path: Path, title: str,
    knee_reasons: Sequence[str] = (),
) -> dict[str, Any]:
    """The sweep's figure (:func:`sweep_figure`) as a PNG at ``path``."""
    return _save(sweep_figure(levels, knee, proposal, title, knee_reasons), path)


def sweep_figure(
    levels: Sequence[dict[str, Any]], knee: int | None, proposal: int | None, title: str, knee_reasons: Sequence[str] = (),
) -> Any:
    """Latency (TTFT p99, completion p99) and 429/error rate against concurrency, per prefix mode, knee and limit marked.

    Every measured level is a labelled tick (the bisection's 10 and 12 as much as 1, 2, 4, 8, 16).
    """
    plt = _pyplot()
    _style(plt)
    fig, (lat, err) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    for mode, colour in MODE_COLOURS.items():
        rows = sorted((lv for lv in levels if lv.get("prefix") == mode), key=lambda lv: lv["concurrency"])
        if not rows:
            continue
        xs = [lv["concurrency"] for lv in rows]
        lat.plot(xs, [lv.get("ttft_p99_ms") for lv in rows], "-", color=colour, marker="o", label=f"TTFT p99, {mode} prefixes")
        lat.plot(xs, [lv.get("completion_p99_ms") for lv in rows], "--", color=colour, marker="s",
                 label=f"completion p99, {mode} prefixes")
        err.plot(xs, [100 * (lv.get("reject_rate") or 0) for lv in rows], "-", color=colour, marker="o",
                 label=f"429/503, {mode} prefixes")
        err.plot(xs, [100 * (lv.get("error_rate") or 0) for lv in rows], ":", color=colour, marker="x",
                 label=f"errors, {mode} prefixes")
    for ax in (lat, err):
        if knee is not None:
            ax.axvline(knee, color="#d62728", linestyle=":", linewidth=2)
        if proposal is not None:
            ax.axvline(proposal, color="#2ca02c", linestyle="-.", linewidth=2)
        ax.grid(True, alpha=0.3)
    # The two vertical lines say what they are on the plot itself (along the line, so no label leaves the axes),
    # and why the knee is where it is under the title.
    from matplotlib.transforms import blended_transform_factory

    for ax in (lat, err):
        at_top = blended_transform_factory(ax.transData, ax.transAxes)
        if knee is not None:
            ax.text(knee, 0.97, f" knee {knee}", rotation=90, va="top", ha="right", color="#d62728", transform=at_top,
                    fontsize=FONT - 1, bbox=LABEL_BOX)
        if proposal is not None:
            ax.text(proposal, 0.97, f" limit {proposal}", rotation=90, va="top", ha="right", color="#2ca02c",
                    transform=at_top, fontsize=FONT - 1, bbox=LABEL_BOX)
    said = []
    if knee is not None:
        said.append(f"knee at {knee}" + (f" ({knee_reasons[0]})" if knee_reasons else ""))
    if proposal is not None:
        said.append(f"proposed limit {proposal}")
    if said:
        title = f"{title}\n{' · '.join(said)}"
    lat.set_yscale("log")  # TTFT and completion latency differ tenfold: both stay readable
    lat.legend(loc="best", fontsize=FONT - 3, framealpha=0.85)
    err.legend(loc="best", fontsize=FONT - 3, framealpha=0.85)
    lat.set_ylabel("ms")
    err.set_ylabel("% of requests")
    err.set_xlabel("concurrent requests")
    err.set_xscale("log", base=2)
    measured = sorted({int(lv["concurrency"]) for lv in levels})
    err.set_xticks(measured, [str(x) for x in measured])
    err.minorticks_off()
    lat.set_title(title)
    fig.tight_layout()
    return fig


def plot_evaluation(
    kinds: Sequence[str], current: Sequence[tuple[int, int]], production: Sequence[tuple[int, int]] | None, path: Path,
    title: str, latency: dict[str, tuple[float | None, float | None]] | None = None,
) -> dict[str, Any]:
    """The evaluation's figure (:func:`evaluation_figure`) as a PNG at ``path``."""
    return _save(evaluation_figure(kinds, current, production, title, latency), path)


def evaluation_figure(
    kinds: Sequence[str], current: Sequence[tuple[int, int]], production: Sequence[tuple[int, int]] | None, title: str,
    latency: dict[str, tuple[float | None, float | None]] | None = None,
) -> Any:
    """Pass rate per kind with its counts (passed/total on each bar), this release beside production, and latency.

    ``current`` and ``production`` hold (passed, total) per kind; ``latency`` maps "this release" / "production" to
    (p50, p95) in ms, drawn in a panel of its own beside the pass rates.
    """
    plt = _pyplot()
    _style(plt)
    series = [("this release", current), *([("production", production)] if production is not None else [])]
    fig, (rates, lat) = plt.subplots(1, 2, figsize=(9, 4.2), gridspec_kw={"width_ratios": [3, 1.2]})
    xs = list(range(len(kinds)))
    width = 0.8 / len(series)
    for i, (name, counts) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        values = [100 * p / t if t else 0.0 for p, t in counts]
        bars = rates.bar([x + offset for x in xs], values, width, label=name, color=RELEASE_COLOURS[name])
        rates.bar_label(bars, labels=[f"{p}/{t}" for p, t in counts], fontsize=FONT - 3, padding=2)
    rates.set_xticks(xs, list(kinds), rotation=20, ha="right")
    rates.set_ylim(0, 125)  # room above 100 % for the counts and the legend, which then hides no bar
    rates.set_yticks([0, 25, 50, 75, 100])
    rates.set_ylabel("pass rate %")
    rates.legend(loc="upper center", ncol=len(series), frameon=False)
    rates.set_title(title)
    names = [n for n, _ in series]
    for i, name in enumerate(names):
        p50, p95 = (latency or {}).get(name, (None, None))
        colour = RELEASE_COLOURS[name]
        if p95 is not None:
            lat.bar(i, p95, 0.6, color=colour, alpha=0.35)
            lat.annotate(f"p95 {p95:.0f}", (i, p95), xytext=(0, 2), textcoords="offset points", ha="center",
                         fontsize=FONT - 3)
        if p50 is not None:
            lat.bar(i, p50, 0.6, color=colour)
            lat.annotate(f"p50 {p50:.0f}", (i, p50), xytext=(0, -12), textcoords="offset points", ha="center",
                         fontsize=FONT - 3, color="white")
    lat.set_xticks(range(len(names)), names, rotation=20, ha="right")
    lat.set_ylabel("latency ms")
    lat.set_title("latency")
    top = max([v for pair in (latency or {}).values() for v in pair if v is not None] or [1.0])
    lat.set_ylim(0, top * 1.2)
    fig.tight_layout()
    return fig


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
