"""PNG plots of gate reports, ramps and objectives, for the Slack notifier to upload.

matplotlib with the Agg backend (no display); each ``*_figure`` function draws
one figure from plain values, and :func:`png_bytes` renders it and closes it so
a long-running bot does not leak figures. matplotlib is imported on first use:
it takes a third of a second of CPU to load, and every ``kimi-ops`` command and
every worker that never draws (most of them) would otherwise pay for it. The
first plot a process draws pays it instead; that plot follows its gate message,
which was posted from the stored numbers first, so nobody waits on it.

matplotlib is not thread-safe: pyplot keeps its figures in one global registry, and
the fonts that measure and render text are shared objects. Gate and ramp plots are
drawn by notifier threads, and a sandbox or a test runs several notifiers in one
process, so every figure is built and saved under one lock (two threads drawing at
once crashed the interpreter).
"""

from __future__ import annotations

import functools
import hashlib
import io
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")
_DRAWING = threading.RLock()  # matplotlib's state is process-wide (see the module docstring)


def _one_at_a_time(draw: Callable[_P, _R]) -> Callable[_P, _R]:
    """``draw`` runs while no other thread of this process builds or saves a figure."""
    @functools.wraps(draw)
    def serialised(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with _DRAWING:
            return draw(*args, **kwargs)

    return serialised


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display; must be chosen before pyplot loads
    import matplotlib.pyplot as plt

    return plt


@_one_at_a_time
def png_bytes(fig: Any) -> bytes:
    """``fig`` as PNG bytes; the figure is closed."""
    plt = _pyplot()
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=110)
    finally:
        plt.close(fig)
    return buffer.getvalue()


def _save(fig: Any, path: Path) -> dict[str, Any]:
    data = png_bytes(fig)  # first: the figure is closed whatever the disk says
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"path": str(path), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "content_type": "image/png"}


# One colour per series in every panel (a prefix mode is the same colour in the latency and the rejection panel);
# the metric is told by the marker and the line. Sizes are read at Slack's preview width (about 360 px).
MODE_COLOURS = {"shared": "#1f77b4", "unique": "#ff7f0e"}
RELEASE_COLOURS = ("#1f77b4", "#7f7f7f")  # this release, then the one it replaces
KNEE, LIMIT, OBJECTIVE = "#d62728", "#2ca02c", "#9467bd"
FONT = 11
# Figures are laid out by fixed margins, not tight_layout (which measures every text: the costliest step of a plot).
MARGINS = {"left": 0.11, "right": 0.97, "top": 0.86, "bottom": 0.14}


def _plain_numbers(axis: Any) -> None:
    """``200``, not ``2×10²``: a log axis labelled with the numbers a reader compares with an objective."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _utc_times(ax: Any, times: Sequence[Any]) -> None:
    """A time axis that says UTC and spans the readings it shows (one reading: a few minutes around it)."""
    import datetime as dt

    from matplotlib.dates import DateFormatter

    ax.xaxis.set_major_formatter(DateFormatter("%H:%M", tz=dt.UTC))  # type: ignore[no-untyped-call]  # untyped in matplotlib
    ax.set_xlabel("time (UTC)")
    if times:
        first, last = min(times), max(times)
        pad = max((last - first) * 0.03, dt.timedelta(minutes=2))
        ax.set_xlim(first - pad, last + pad)


def _style(plt: Any) -> None:
    plt.rcParams.update({"font.size": FONT, "axes.titlesize": FONT + 1, "legend.fontsize": FONT - 2,
                         "xtick.labelsize": FONT - 1, "ytick.labelsize": FONT - 1})


@_one_at_a_time
def sweep_figure(
    levels: Sequence[dict[str, Any]], knee: int | None, proposal: int | None, title: str, knee_reasons: Sequence[str] = (),
    objectives: Mapping[str, float | None] | None = None, mix: Sequence[str] = (),
) -> Any:
    """Latency (TTFT p99, completion p99) and 429/error rate against concurrency, per prefix mode, with the objectives.

    Every measured level is a labelled tick with its sample count (``8`` over ``n=40``); latency reads in plain
    milliseconds on a log axis; the objectives are dashed lines; the knee and the proposed limit are vertical
    lines named in the legend, so no label sits on the data.
    ``mix`` is what was replayed beside production's mix, a line each, written under the axes.
    """
    plt = _pyplot()
    _style(plt)
    fig, (lat, err) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    fig.subplots_adjust(**{**MARGINS, "bottom": 0.12, "top": 0.88, "hspace": 0.08})
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
    wanted = dict(objectives or {})
    for key, axis, scale, words, unit in (("ttft_p99_ms", lat, 1, "TTFT p99", " ms"),
                                          ("completion_p99_ms", lat, 1, "completion p99", " ms"),
                                          ("reject_rate", err, 100, "429/503", "%"), ("error_rate", err, 100, "errors", "%")):
        value = wanted.get(key)
        if value is not None:
            axis.axhline(value * scale, color=OBJECTIVE, linestyle=(0, (6, 3)), linewidth=1.2,
                         alpha=0.9 if unit == " ms" else 0.6, label=f"{words} objective {value * scale:g}{unit}")
    for ax in (lat, err):
        if knee is not None:
            ax.axvline(knee, color=KNEE, linestyle=":", linewidth=2, label=f"knee {knee}" if ax is lat else None)
        if proposal is not None:
            ax.axvline(proposal, color=LIMIT, linestyle="-.", linewidth=2, label=f"limit {proposal}" if ax is lat else None)
        ax.grid(True, alpha=0.3)
    said = []
    if knee is not None:
        said.append(f"knee at {knee}" + (f" ({knee_reasons[0]})" if knee_reasons else ""))
    if proposal is not None:
        said.append(f"proposed limit {proposal}")
    if said:
        title = f"{title}\n{' · '.join(said)}"
    lat.set_yscale("log")  # TTFT and completion latency differ tenfold: both stay readable
    _plain_numbers(lat.yaxis)
    lat.legend(loc="upper left", fontsize=FONT - 4, framealpha=0.85, ncol=2)
    err.legend(loc="upper left", fontsize=FONT - 4, framealpha=0.85, ncol=2)
    lat.set_ylabel("latency ms (log)")
    err.set_ylabel("% of requests")
    err.set_xlabel("concurrent requests (n = requests measured at that level)")
    err.set_xscale("log", base=2)
    measured = sorted({int(lv["concurrency"]) for lv in levels})
    counts = {c: sum(int(lv.get("requests") or 0) for lv in levels if int(lv["concurrency"]) == c) for c in measured}
    err.set_xticks(measured, [f"{c}\nn={counts[c]}" for c in measured])
    err.minorticks_off()
    lat.set_title(title)
    if mix:  # below the axes, where the fixed margins leave room for it
        fig.subplots_adjust(bottom=0.12 + 0.03 * len(mix))
        fig.text(0.01, 0.01, "\n".join(mix), fontsize=FONT - 4, va="bottom", ha="left", color="#444444")
    return fig


@_one_at_a_time
def evaluation_figure(
    kinds: Sequence[str], current: Sequence[tuple[int, int]], production: Sequence[tuple[int, int]] | None, title: str,
    latency: dict[str, tuple[float | None, float | None]] | None = None, *,
    replaced: str | None = None, tolerance: float | None = None,
) -> Any:
    """Pass rate per kind with its counts, this release beside the one it replaces, and latency side by side.

    ``current`` and ``production`` hold (passed, total) per kind; ``replaced`` names the release compared with (the
    live one a deploy replaces, or the one a rollback rolls away from); ``tolerance`` (the allowed fall of a kind's
    pass rate) draws the lowest rate that passes under each kind; ``latency`` maps "this release" / "production"
    to (p50, p95) in ms, drawn as separate bars (p95 is not stacked on p50: neither reads as a sum).
    """
    plt = _pyplot()
    _style(plt)
    other = f"replaced: {replaced}" if replaced else "the release it replaces"
    named = {"this release": "this release", "production": other}
    series = [("this release", current), *([("production", production)] if production is not None else [])]
    fig, (rates, lat) = plt.subplots(1, 2, figsize=(9.5, 4.4), gridspec_kw={"width_ratios": [3, 1.4]})
    fig.subplots_adjust(left=0.08, right=0.98, top=0.86, bottom=0.22, wspace=0.3)
    xs = list(range(len(kinds)))
    width = 0.8 / len(series)
    for i, (name, counts) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        values = [100 * p / t if t else 0.0 for p, t in counts]
        bars = rates.bar([x + offset for x in xs], values, width, label=named[name], color=RELEASE_COLOURS[i])
        rates.bar_label(bars, labels=[f"{p}/{t}" for p, t in counts], fontsize=FONT - 3, padding=2)
    if production is not None and tolerance is not None:
        floors = [(x, 100 * (p / t - tolerance)) for x, (p, t) in zip(xs, production, strict=True) if t]
        for n, (x, floor) in enumerate(floors):
            rates.hlines(max(floor, 0), x - 0.45, x + 0.45, colors=KNEE, linestyles="--", linewidth=1.5,
                         label=f"lowest passing rate (replaced − {100 * tolerance:g} pts)" if n == 0 else None)
    rates.set_xticks(xs, list(kinds), rotation=20, ha="right")
    rates.set_ylim(0, 125)  # room above 100 % for the counts and the legend, which then hides no bar
    rates.set_yticks([0, 25, 50, 75, 100])
    rates.set_ylabel("pass rate %")
    rates.legend(loc="upper center", ncol=3, frameon=False, fontsize=FONT - 3)
    rates.set_title(title)
    names = [n for n, _ in series]
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        p50, p95 = (latency or {}).get(name, (None, None))
        spots = [(q, v) for q, v in ((0, p50), (1, p95)) if v is not None]
        bars = lat.bar([q + (i - (len(names) - 1) / 2) * width for q, _ in spots], [v for _, v in spots], width,
                       color=RELEASE_COLOURS[i], label=named[name])
        lat.bar_label(bars, labels=[f"{v:.0f}" for _, v in spots], fontsize=FONT - 3, padding=2)
    lat.set_xticks([0, 1], ["p50", "p95"])
    lat.set_ylabel("latency ms")
    lat.set_title("latency")
    top = max([v for pair in (latency or {}).values() for v in pair if v is not None] or [1.0])
    lat.set_ylim(0, top * 1.25)
    return fig


def plot_slo(rows: Sequence[dict[str, Any]], path: Path, title: str) -> dict[str, Any]:
    """The figure of :func:`slo_figure` as a PNG at ``path``."""
    return _save(slo_figure(rows, title), path)


@_one_at_a_time
def slo_figure(rows: Sequence[dict[str, Any]], title: str) -> Any:
    """The last hours of one endpoint: each objective's bad share per reading beside its budget, KV cache and queue.

    ``rows`` are readings oldest first: ``at`` (datetime), ``bad`` (objective → bad share or None), ``budget``
    (objective → allowed share), ``kv`` and ``waiting``. The time axis spans the readings (in UTC); a series with
    no value is left out, and a panel with none says so instead of drawing empty axes.
    """
    plt = _pyplot()
    fig, (burn, load) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    fig.subplots_adjust(left=0.12, right=0.97, top=0.9, bottom=0.12, hspace=0.1)
    times = [r["at"] for r in rows]
    names = sorted({n for r in rows for n in r.get("bad", {})})
    drawn = 0
    for name in names:
        budget = next((r["budget"][name] for r in rows if name in r.get("budget", {})), None)
        values = [(r["bad"].get(name) / budget) if budget and r["bad"].get(name) is not None else None for r in rows]
        if any(v is not None for v in values):
            burn.plot(times, values, marker=".", label=name)
            drawn += 1
    burn.axhline(1, color="grey", linestyle=":", label="burning exactly the budget")
    burn.set_ylabel("burn rate (× budget)")
    if not drawn:
        burn.text(0.5, 0.5, "no traffic measured against the objectives yet", ha="center", va="center",
                  transform=burn.transAxes, color="grey")
    burn.legend(fontsize=7, ncol=3)
    for label, values in (("KV cache %", [100 * r["kv"] if r.get("kv") is not None else None for r in rows]),
                          ("requests waiting", [r.get("waiting") for r in rows])):
        if any(v is not None for v in values):
            load.plot(times, values, marker=".", label=label)
    if load.get_lines():
        load.legend(fontsize=7)
    else:
        load.text(0.5, 0.5, "no load readings yet", ha="center", va="center", transform=load.transAxes, color="grey")
    for ax in (burn, load):
        ax.grid(True, alpha=0.3)
    _utc_times(load, times)
    fig.suptitle(title, fontsize=10)
    return fig


@_one_at_a_time
def ramp_figure(points: Sequence[dict[str, Any]], title: str) -> Any:
    """A ramp as it went: each backend's share of the weight per step (the internal cohort's step marked), and each
    side's first-token p99 per soak on an axis from zero.

    ``points`` are the ramp's messages oldest first: ``at`` (datetime), ``step`` (``internal``, ``10%``…) and
    ``sides`` (``name``, ``weight``, ``cohort``, and from the last soak ``ttft_p99_ms``). A side with no latency
    reading (the fallback, which kimi-ops does not measure) has no latency line.
    """
    plt = _pyplot()
    fig, (weights, latency) = plt.subplots(2, 1, figsize=(7, 5.2), sharex=True)
    fig.subplots_adjust(left=0.12, right=0.97, top=0.9, bottom=0.12, hspace=0.12)
    times = [p["at"] for p in points]
    names = list(dict.fromkeys(s["name"] for p in points for s in p["sides"]))
    highest = 0.0
    for name in names:
        sides: list[dict[str, Any]] = [next((s for s in p["sides"] if s["name"] == name), {}) for p in points]
        weights.step(times, [s.get("weight") for s in sides], where="post", marker="o", label=name)
        ttft = [s.get("ttft_p99_ms") for s in sides]
        if any(v is not None for v in ttft):
            latency.plot(times, ttft, marker=".", label=f"{name} TTFT p99")
            highest = max([highest, *(v for v in ttft if v is not None)])
    for at, point in zip(times, points, strict=True):
        step = str(point.get("step") or "")
        cohort = any(s.get("cohort") and not s.get("weight") for s in point["sides"])
        if step:
            weights.annotate(step + (" (internal cohort)" if cohort and "internal" not in step else ""), (at, 100),
                             xytext=(2, -12), textcoords="offset points", fontsize=7, rotation=0)
    weights.set_ylabel("% of the weight")
    weights.set_ylim(-5, 110)
    weights.legend(fontsize=7, loc="center left")
    latency.set_ylabel("TTFT p99 ms")
    latency.set_ylim(0, highest * 1.25 if highest else 1)
    if latency.get_lines():
        latency.legend(fontsize=7)
    for ax in (weights, latency):
        ax.grid(True, alpha=0.3)
    _utc_times(latency, times)
    fig.suptitle(title, fontsize=10)
    return fig
