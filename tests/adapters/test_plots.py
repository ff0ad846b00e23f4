"""Gate plots as a reviewer reads them in Slack: named, every measured level labelled, colours that keep their meaning.

The figures are inspected before they are saved (``sweep_figure``, ``evaluation_figure``); the PNGs themselves
were looked at by eye when this was written.
"""

from __future__ import annotations

from pathlib import Path

from bot.adapters.plots import evaluation_figure, plot_sweep, sweep_figure

LEVELS = [{"prefix": mode, "concurrency": c, "ttft_p99_ms": 80.0 * c, "completion_p99_ms": 600.0 * c,
           "reject_rate": 0.1 if c >= 12 else 0.0, "error_rate": 0.0}
          for mode in ("shared", "unique") for c in (1, 2, 4, 8, 10, 12, 16)]


def test_the_sweep_labels_every_measured_level_keeps_colours_and_annotates_the_knee(tmp_path: Path) -> None:
    fig = sweep_figure(LEVELS, 12, 10, "Traffic gate · rel-b on kimi-prod: latency and rejections",
                       knee_reasons=["TTFT p99 960 ms > 900 ms objective"])
    lat, err = fig.axes
    assert [t.get_text() for t in err.get_xticklabels()] == ["1", "2", "4", "8", "10", "12", "16"]
    assert "rel-b on kimi-prod" in lat.get_title() and "knee at 12 (TTFT p99 960 ms > 900 ms objective)" in lat.get_title()
    colours = {ax: {line.get_label().split(", ")[-1]: line.get_color() for line in ax.get_lines()
                    if "prefixes" in line.get_label()} for ax in (lat, err)}
    assert colours[lat] == colours[err] and len(set(colours[lat].values())) == 2  # one colour per prefix mode, both panels
    texts = {t.get_text().strip() for ax in (lat, err) for t in ax.texts}
    assert {"knee 12", "limit 10"} <= texts
    assert plot_sweep(LEVELS, 12, 10, tmp_path / "s.png", "t")["bytes"] > 10_000


def test_the_model_plot_shows_counts_and_latency_and_its_legend_hides_no_bar() -> None:
    fig = evaluation_figure(["coding", "refusal"], [(2, 3), (2, 2)], [(3, 3), (2, 2)], "Model gate · rel-b on kimi-prod",
                            latency={"this release": (820.0, 2400.0), "production": (760.0, 2100.0)})
    rates, latency = fig.axes
    labels = {t.get_text() for t in rates.texts}
    assert {"2/3", "3/3", "2/2"} <= labels  # counts on the bars
    assert {t.get_text() for t in latency.texts} >= {"p50 820", "p95 2400", "p50 760", "p95 2100"}
    assert rates.get_ylim()[1] > 110  # the legend sits above the 100 % bars
    fig.canvas.draw()
    legend = rates.get_legend().get_window_extent()
    tallest = max(bar.get_window_extent().y1 for bar in rates.patches)
    assert legend.y0 >= tallest - 1
    assert "rel-b on kimi-prod" in rates.get_title()
