"""Gate plots as an SRE reads them in Slack: named, every measured level labelled, colours that keep their meaning,
objectives and tolerances drawn, axes that span the data.

The figures are inspected before they are saved (``sweep_figure``, ``evaluation_figure``, ``ramp_figure``,
``slo_figure``, and ``gate_figure`` drawing a stored report): their titles, tick labels, legends and axis limits are
what a reader sees.
"""

from __future__ import annotations

import datetime as dt

from matplotlib.dates import num2date

from bot.adapters.gate_plots import gate_figure
from bot.adapters.plots import evaluation_figure, png_bytes, ramp_figure, slo_figure, sweep_figure

LEVELS = [{"prefix": mode, "concurrency": c, "requests": 20, "ttft_p99_ms": 80.0 * c, "completion_p99_ms": 600.0 * c,
           "reject_rate": 0.1 if c >= 12 else 0.0, "error_rate": 0.0}
          for mode in ("shared", "unique") for c in (1, 2, 4, 8, 10, 12, 16)]
START = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def legend_of(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_the_sweep_labels_every_level_with_its_samples_draws_the_objectives_and_keeps_labels_off_the_data() -> None:
    fig = sweep_figure(LEVELS, 12, 10, "Traffic gate · rel-b on kimi-prod: latency and rejections",
                       knee_reasons=["TTFT p99 960 ms > 900 ms objective"],
                       objectives={"ttft_p99_ms": 900.0, "completion_p99_ms": 30_000.0, "reject_rate": 0.01})
    lat, err = fig.axes
    assert [t.get_text() for t in err.get_xticklabels()] == [f"{c}\nn=40" for c in (1, 2, 4, 8, 10, 12, 16)]
    assert "rel-b on kimi-prod" in lat.get_title() and "knee at 12 (TTFT p99 960 ms > 900 ms objective)" in lat.get_title()
    colours = {ax: {line.get_label().split(", ")[-1]: line.get_color() for line in ax.get_lines()
                    if "prefixes" in line.get_label()} for ax in (lat, err)}
    assert colours[lat] == colours[err] and len(set(colours[lat].values())) == 2  # one colour per prefix mode, both panels
    # The objectives are lines of their own; the knee and the limit are named in the legend, not written on a line.
    assert {"TTFT p99 objective 900 ms", "completion p99 objective 30000 ms", "knee 12", "limit 10"} <= set(legend_of(lat))
    assert "429/503 objective 1%" in legend_of(err)
    assert not [t for ax in (lat, err) for t in ax.texts]
    # Plain milliseconds on the log axis, never 2×10².
    fig.canvas.draw()
    shown = [t.get_text() for t in lat.get_yticklabels() if t.get_text()]
    assert shown and all("10^" not in t and "times" not in t and "$" not in t for t in shown), shown
    assert png_bytes(sweep_figure(LEVELS, 12, 10, "t"))[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_model_plot_names_what_it_compares_with_draws_the_tolerance_and_latency_side_by_side() -> None:
    fig = evaluation_figure(["coding", "refusal"], [(2, 3), (2, 2)], [(3, 3), (2, 2)], "Model gate · rel-b on kimi-prod",
                            latency={"this release": (820.0, 2400.0), "production": (760.0, 2100.0)},
                            replaced="rel-a", tolerance=0.05)
    rates, latency = fig.axes
    assert {"2/3", "3/3", "2/2"} <= {t.get_text() for t in rates.texts}  # counts on the bars
    assert legend_of(rates) == ["lowest passing rate (replaced − 5 pts)", "this release", "replaced: rel-a"]
    floors = sorted(round(line.get_segments()[0][0][1]) for line in rates.collections)
    assert floors == [95, 95]  # 100 % in production, 5 points of tolerance
    # p50 and p95 are bars of their own, each with its number: neither stands on the other.
    assert [t.get_text() for t in latency.get_xticklabels()] == ["p50", "p95"]
    assert {t.get_text() for t in latency.texts} == {"820", "2400", "760", "2100"}
    assert all(bar.get_y() == 0 for bar in latency.patches)
    assert rates.get_ylim()[1] > 110  # the legend sits above the 100 % bars
    fig.canvas.draw()
    legend = rates.get_legend().get_window_extent()
    tallest = max(bar.get_window_extent().y1 for bar in rates.patches)
    assert legend.y0 >= tallest - 1
    assert "rel-b on kimi-prod" in rates.get_title()


def test_the_ramp_plot_names_its_release_and_steps_starts_latency_at_zero_and_says_utc() -> None:
    sides = lambda w, cohort, ttft: [  # noqa: E731
        {"name": "kimi-prod", "weight": w, "cohort": cohort, "ttft_p99_ms": ttft},
        {"name": "fallback", "weight": 100 - w, "cohort": not cohort}]  # the fallback is not measured
    points = [{"at": START + dt.timedelta(minutes=5 * i), "step": step, "sides": sides(w, cohort, ttft)}
              for i, (step, w, cohort, ttft) in enumerate([("internal", 0, True, None), ("10%", 10, True, 96.0),
                                                           ("50%", 50, True, 101.0), ("open", 100, True, 104.0)])]
    fig = ramp_figure(points, "Ramp of rel-b on kimi-prod · deployment #4")
    weights, latency = fig.axes
    assert "rel-b" in fig.get_suptitle()
    assert [t.get_text().split(" (")[0] for t in weights.texts] == ["internal", "10%", "50%", "open"]
    assert [line.get_label() for line in latency.get_lines()] == ["kimi-prod TTFT p99"]  # no empty fallback series
    assert latency.get_ylim()[0] == 0 and latency.get_ylim()[1] >= 104
    assert latency.get_xlabel() == "time (UTC)"
    left, right = (num2date(x) for x in latency.get_xlim())
    assert left <= START and right >= START + dt.timedelta(minutes=15) and right - left < dt.timedelta(hours=1)


def test_the_slo_plot_spans_its_readings_and_says_when_there_is_nothing_to_draw() -> None:
    rows = [{"at": START + dt.timedelta(minutes=i), "bad": {"ttft": None}, "budget": {"ttft": 0.01}, "kv": None,
             "waiting": None} for i in range(2)]
    fig = slo_figure(rows, "kimi-prod: error-budget burn and load, last 6 h")
    burn, load = fig.axes
    left, right = (num2date(x) for x in load.get_xlim())
    assert left.year == right.year == 2026 and right - left < dt.timedelta(hours=1)  # not 2025-2029
    assert [line.get_label() for line in burn.get_lines()] == ["burning exactly the budget"]  # no empty series
    assert "no traffic measured" in burn.texts[0].get_text() and "no load readings" in load.texts[0].get_text()
    assert load.get_xlabel() == "time (UTC)"
    rows[1] = {**rows[1], "bad": {"ttft": 0.02}, "kv": 0.4, "waiting": 2}
    drawn = slo_figure(rows, "t")
    assert {line.get_label() for line in drawn.axes[0].get_lines()} == {"ttft", "burning exactly the budget"}
    assert {line.get_label() for line in drawn.axes[1].get_lines()} == {"KV cache %", "requests waiting"}


def test_a_gate_plot_is_drawn_from_the_stored_report_alone() -> None:
    # What an approval is bound to (the report's numbers) is all the plot needs: objectives, knee, limit, mix, tolerance.
    traffic = {"gate": "traffic", "attachments": {
        "sweep": {"levels": LEVELS, "objectives": {"ttft_p99_ms": 900.0, "reject_rate": 0.01}},
        "knee": {"concurrency": 12, "broken": ["429/503 rate 10% > 1%"]},
        "proposal": {"max_concurrent_requests": 10}, "mix": {"words": ["replayed: live mix", "production: live mix"]}}}
    lat, _ = gate_figure(traffic, endpoint="kimi-prod", release="rel-b").axes
    assert lat.get_title().startswith("Traffic gate · rel-b on kimi-prod") and "knee at 12 (429/503 rate" in lat.get_title()
    assert {"TTFT p99 objective 900 ms", "knee 12", "limit 10"} <= set(legend_of(lat))
    assert [t.get_text() for t in lat.figure.texts] == ["replayed: live mix\nproduction: live mix"]
    summary = {"kinds": {"coding": {"passed": 2, "total": 3}}, "latency_p50_ms": 820.0, "latency_p95_ms": 2400.0}
    model = {"gate": "model", "attachments": {"evaluation": {
        "release": "rel-b", "summary": summary, "tolerance": 0.05,
        "production": {"release": "rel-a", "summary": {**summary, "kinds": {"coding": {"passed": 3, "total": 3}}}}}}}
    rates, _ = gate_figure(model, endpoint="kimi-prod", release="rel-b").axes
    assert rates.get_title() == "Model gate · rel-b on kimi-prod"
    assert legend_of(rates) == ["lowest passing rate (replaced − 5 pts)", "this release", "replaced: rel-a"]
    # A report without numbers (an errored sweep, a gate that draws none) has no plot.
    assert gate_figure({"gate": "traffic", "attachments": {"sweep": {"levels": []}}}, endpoint="e", release="r") is None
    assert gate_figure({"gate": "artifact", "attachments": {}}, endpoint="e", release="r") is None
