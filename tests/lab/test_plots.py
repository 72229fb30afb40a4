"""Tests for qae_lab.lab.plots: the figures' traces and axes, and what a reader sees (titles, legends, labels)."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import pytest

from qae_lab.lab import plots
from qae_lab.lab.plots import bar_figure, gate_heatmap, heatmap_figure, line_figure
from qae_lab.toys.sparsity import gate_table


# ---------------------------------------------------------------- figures


def test_line_figure_traces_and_axes():
    fig = line_figure(
        [1, 10, 100],
        {"mean": [3, 2, 1], "quantile": [1, 2, 3]},
        title="t",
        x_title="eta",
        y_title="err",
        log_x=True,
        log_y=True,
        markers=True,
    )
    assert isinstance(fig, go.Figure)
    assert [t.name for t in fig.data] == ["mean", "quantile"]
    assert all(t.type == "scatter" and t.mode == "lines+markers" for t in fig.data)
    assert list(fig.data[0].x) == [1, 10, 100] and list(fig.data[1].y) == [1.0, 2.0, 3.0]
    assert fig.data[0].line.color != fig.data[1].line.color
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert fig.layout.title.text == "t"
    assert fig.layout.xaxis.title.text == "eta" and fig.layout.yaxis.title.text == "err"
    lin = line_figure(range(3), {"a": [0, 1, 2]})
    assert lin.layout.xaxis.type == "linear" and lin.layout.yaxis.type == "linear"
    assert lin.data[0].mode == "lines" and list(lin.data[0].x) == [0, 1, 2]  # a range is accepted
    assert line_figure([0, 1], {"a": [0, 1]}, log_y=True).layout.xaxis.type == "linear"


def test_line_figure_bands_add_a_fill_trace():
    fig = line_figure([0, 1, 2], {"a": [1, 2, 3], "b": [0, 0, 0]}, bands={"a": [0.5, 0.1, 0.2]})
    assert len(fig.data) == 3  # band of "a", "a", "b": only "a" has a band
    band, a, b = fig.data
    assert band.fill == "toself" and band.showlegend is False
    assert (a.name, b.name) == ("a", "b") and a.fill is None
    # the band runs along the upper edge and back along the lower one
    assert list(band.x) == [0, 1, 2, 2, 1, 0]
    assert list(band.y) == pytest.approx([1.5, 2.1, 3.2, 2.8, 1.9, 0.5])
    assert band.fillcolor == a.line.color


def test_heatmap_figure():
    fig = heatmap_figure(
        [[0, 1, -1], [2, 0, 1]], x=[0, 1, 2], y=["K=0.4", "K=0.6"], text=[["a", "b", "c"]] * 2, title="gate", zmid=0.0
    )
    hm, labels = fig.data  # the heatmap, then its cell labels drawn over it
    assert hm.type == "heatmap" and labels.type == "scatter" and labels.mode == "text"
    assert [list(row) for row in hm.z] == [[0.0, 1.0, -1.0], [2.0, 0.0, 1.0]]
    assert list(hm.x) == [0, 1, 2] and list(hm.y) == ["K=0.4", "K=0.6"]
    assert [list(row) for row in hm.text] == [["a", "b", "c"]] * 2 and list(labels.text) == ["a", "b", "c"] * 2
    assert list(labels.x) == [0, 1, 2] * 2 and list(labels.y) == ["K=0.4"] * 3 + ["K=0.6"] * 3
    assert labels.hoverinfo == "skip" and labels.showlegend is False  # the heatmap's hover, no legend entry
    assert (hm.zmin, hm.zmax) == (-2.0, 2.0) and fig.layout.title.text == "gate"  # even about zmid = 0
    plain = heatmap_figure([[1.0]], x=[0], y=[0], zmid=None, zmin=-1, zmax=1)
    assert len(plain.data) == 1 and plain.data[0].text is None
    assert (plain.data[0].zmin, plain.data[0].zmax) == (-1, 1)


def test_bar_figure():
    fig = bar_figure(["G=4", "G=8"], {"mean": [0.1, 0.2], "quantile": [0.6, 0.7]}, y_title="zero frac")
    assert [t.type for t in fig.data] == ["bar", "bar"]
    assert [t.name for t in fig.data] == ["mean", "quantile"]
    assert list(fig.data[1].x) == ["G=4", "G=8"] and list(fig.data[1].y) == [0.6, 0.7]
    assert fig.layout.barmode == "group" and fig.layout.yaxis.title.text == "zero frac"
    assert fig.data[0].marker.color != fig.data[1].marker.color


def test_gate_heatmap_symbols_and_colours():
    # G=8, linear convention: c = 5 (K=0.4) and c = 3 (K=0.6) move both sides (entry 2)
    table = gate_table(8, [0.4, 0.6], "linear")
    fig = gate_heatmap(table, [0.4, 0.6], title="gate")
    hm, _ = fig.data
    assert [list(row) for row in hm.z] == [[float(v) for v in row] for row in table.tolist()]
    assert list(hm.y) == ["K=0.4", "K=0.6"] and list(hm.x) == list(range(9))
    assert list(hm.text[0]) == ["0", "+", "+", "+", "+", "±", "−", "−", "0"]
    assert hm.showscale is False and fig.layout.title.text == "gate"
    # each entry falls in its own colour band: -1 red, 0 grey, +1 green, 2 purple

    def colour(v):
        x = (v - hm.zmin) / (hm.zmax - hm.zmin)
        stops = hm.colorscale
        return next(c for (lo, c), (hi, _) in zip(stops[:-1], stops[1:]) if lo <= x <= hi and lo < hi)

    assert [colour(v) for v in (-1, 0, 1, 2)] == ["#d62728", "#e5e5e5", "#2ca02c", "#9467bd"]


def test_run_curves_figure_panels_and_notes():
    from qae_lab.lab.plots import run_curves_figure

    rows = [
        {"step": 1, "reward": 0.2, "qae/k": 0.4, "entropy": None},
        {"step": 2, "reward": 0.4, "qae/k": 0.7, "entropy": 0.5},
    ]
    panels = {"reward": ("reward",), "entropy": ("entropy",), "alpha": ("saah/alpha",), "K": ("qae/k",)}
    fig = run_curves_figure(rows, panels, notes={"K": "unused: K is drawn"})
    by_metric = {t.meta: t for t in fig.data}
    assert list(by_metric["entropy"].x) == [2]  # a None value is skipped, not drawn as 0
    assert (by_metric["reward"].xaxis, by_metric["entropy"].xaxis, by_metric["qae/k"].xaxis) == ("x", "x2", "x4")
    assert [by_metric[m].name for m in ("reward", "entropy", "qae/k")] == ["mean reward", "entropy", "K"]
    # the empty panel names what it would draw (a line of one missing point: plotly.js leaves empty ones out of the
    # legend) and says why it is empty; a note for a panel with data is not shown
    assert list(by_metric["saah/alpha"].x) == [None] and by_metric["saah/alpha"].name == "α"
    notes = [a for a in fig.layout.annotations if a.text not in panels]
    assert [a.text for a in notes] == ["not logged in this run"]
    alpha_panel = fig.get_subplot(2, 1)  # the third panel: row 2, column 1
    (note,) = notes
    assert note.xref == "paper" and note.xanchor == "center"
    assert note.x == pytest.approx(sum(alpha_panel.xaxis.domain) / 2)
    assert alpha_panel.yaxis.domain[0] < note.y < alpha_panel.yaxis.domain[1]
    waiting = run_curves_figure([], panels, notes=dict.fromkeys(panels, "waiting for the first step..."))
    assert [a.text for a in waiting.layout.annotations if a.text not in panels] == ["waiting for the first step..."] * 4
    assert [t.name for t in waiting.data] == ["mean reward", "entropy", "α", "K"]


def test_run_curves_each_metric_keeps_one_colour():
    from qae_lab.lab.live import LIVE_PANELS
    from qae_lab.lab.plots import CURVES, curve_style, run_curves_figure

    colours = [c for _, _, c in CURVES.values()]
    assert len(set(colours)) == len(colours)  # no two metrics share a colour
    assert all(name and "/" not in name and unit for name, unit, _ in CURVES.values())  # plain names, units
    assert {m for keys in LIVE_PANELS.values() for m in keys} <= set(CURVES)  # the dashboard draws only named ones
    # the same metric the same colour in every panel and at every redraw, whatever else is drawn (before: the
    # n-th drawn line took the n-th colour, so a metric's colour moved as others appeared)
    panels = {"a": ("reward", "qae/k"), "b": ("qae/k", "saah/alpha"), "c": ("ledger/dh_hard",)}
    early = run_curves_figure([{"step": 1, "qae/k": 0.4}], panels)
    late = run_curves_figure([{"step": s, "reward": 0.5, "qae/k": 0.4, "saah/alpha": 1.0} for s in (1, 2)], panels)
    seen = {}
    for fig in (early, late):
        for t in fig.data:
            assert seen.setdefault(t.meta, t.line.color) == t.line.color == curve_style(t.meta)[2], t.meta
    assert len({t.line.color for t in late.data if t.legend == "legend2"}) == 2  # different in one panel
    assert curve_style("my/metric")[0] == "my/metric" and curve_style("my/metric")[2] in plots.PALETTE


def test_run_curves_legend_per_panel_units_and_shares():
    from qae_lab.lab.live import LIVE_PANELS
    from qae_lab.lab.plots import LEGEND_PX, run_curves_figure

    rows = [{"step": s, "reward": s % 2, "qae/easy_frac": 0.25, "qae/k": 0.4} for s in (1, 2)]
    fig = run_curves_figure(rows, LIVE_PANELS, title="step 2 of 40 · knobs in force:<br>steps 1-2: K 0.40")
    legends = sorted({t.legend for t in fig.data})
    assert legends == ["legend"] + [f"legend{i}" for i in range(2, len(LIVE_PANELS) + 1)]  # one legend per panel
    for i, name in enumerate(LIVE_PANELS):
        r, c = i // 2 + 1, i % 2 + 1
        panel, legend = fig.get_subplot(r, c), fig.layout["legend" if i == 0 else f"legend{i + 1}"]
        # the legend sits on the panel's top edge, at its left: above its own plot, under its title
        assert (legend.x, legend.y, legend.yanchor) == (panel.xaxis.domain[0], panel.yaxis.domain[1], "bottom")
        title = next(a for a in fig.layout.annotations if a.text == name)
        assert title.yshift == LEGEND_PX
        assert panel.yaxis.title.text and panel.xaxis.title.text == "training step"  # units on every axis
    shares = fig.get_subplot(1, 1).yaxis
    assert shares.title.text == "share of prompts" and list(shares.range) == [-0.03, 1.03]  # 0..1 at every redraw
    assert fig.get_subplot(3, 1).yaxis.title.text == "reward · share correct"


# ---------------------------------------------------------------- what a reader sees


def test_long_titles_wrap_at_words_and_short_ones_stay():
    title = (
        "w_t at α = 0.5, prompt 3 (top: SA-AH, bottom: AH) · batch: mean w on A<0 tokens 0.910, effective tokens 0.957"
    )
    lines = plots.wrap_title(title).split("<br>")
    assert len(lines) == 2 and all(len(line) <= plots.TITLE_CHARS for line in lines)
    assert " ".join(lines) == title  # nothing lost, broken only at spaces
    assert plots.wrap_title("a b c", width=10) == "a b c"
    assert plots.wrap_title("aaaa bbbb<br>cc", width=10) == "aaaa bbbb<br>cc"  # an explicit break stays
    with pytest.raises(ValueError, match="width must be >= 10"):
        plots.wrap_title("x", width=3)
    fig = line_figure([0, 1], {"a": [0, 1]}, title=title)
    assert fig.layout.title.text.count("<br>") == 1
    assert fig.layout.margin.t > line_figure([0, 1], {"a": [0, 1]}, title="short").layout.margin.t  # room for it


def test_heatmap_refuses_repeated_labels_and_writes_readable_text():
    with pytest.raises(ValueError, match=r"y labels must be unique .* 'p=5/8 easy' appears 2 times"):
        heatmap_figure([[1.0], [0.5]], x=["y1"], y=["p=5/8 easy", "p=5/8 easy"])
    with pytest.raises(ValueError, match="x labels must be unique"):
        heatmap_figure([[1.0, 0.5]], x=["y1", "y1"], y=["a"])
    labels = heatmap_figure([[1.0, 0.5]], x=[0, 1], y=["a"], text=[["The", " coins"]]).data[1]
    assert labels.textfont.size == 11 and list(labels.text) == ["The", "coins"]  # a fixed size, not shrunk to dots


# ---------------------------------------------------------------- heatmap labels: contrast, fit, margins


def test_text_colour_follows_the_cells_luminance_hand_computed():
    # WCAG: L = 0.2126 R + 0.7152 G + 0.0722 B of the linearised channels; contrast (L1 + 0.05) / (L2 + 0.05).
    # #808080: each channel 128/255 -> ((0.502 + 0.055) / 1.055) ** 2.4 = 0.2159 = L; #1a1a1a: L = 0.0103.
    # dark text: (0.2159 + 0.05) / (0.0103 + 0.05) = 4.41; white: 1.05 / 0.2659 = 3.95 -> dark.
    # #767676 (118): L = 0.1812; dark: 0.2312 / 0.0603 = 3.83; white: 1.05 / 0.2312 = 4.54 -> white.
    assert plots.relative_luminance("#808080") == pytest.approx(0.2159, abs=1e-4)
    assert plots.relative_luminance("#1a1a1a") == pytest.approx(0.0103, abs=1e-4)
    assert plots.text_colour("#808080") == plots.TEXT_DARK and plots.text_colour("#767676") == plots.TEXT_LIGHT
    assert plots.text_colour("rgb(253, 231, 37)") == plots.TEXT_DARK  # Viridis' yellow: dark, as a reader expects
    assert plots.text_colour("rgb(103,0,31)") == plots.TEXT_LIGHT  # RdBu's darkest red: white
    with pytest.raises(ValueError, match="colour must be"):
        plots.text_colour("red")


def test_heatmap_labels_take_the_colour_that_reads_on_their_cell():
    # a black-to-white scale over [0, 1]: z = 0 is black (white text), z = 1 white (dark text), z = 0.5 is
    # rgb(128, 128, 128) (dark text, as computed by hand above); a blank cell shows the white plot behind it
    scale = [[0.0, "#000000"], [1.0, "#ffffff"]]
    fig = heatmap_figure(
        [[0.0, 0.5, 1.0, float("nan")]],
        x=[0, 1, 2, 3],
        y=["r"],
        text=[["a", "b", "c", "d"]],
        colorscale=scale,
        zmid=None,
        zmin=0.0,
        zmax=1.0,
    )
    assert list(fig.data[1].textfont.color) == [plots.TEXT_LIGHT, plots.TEXT_DARK, plots.TEXT_DARK, plots.TEXT_DARK]
    assert plots.scale_colour(fig.data[0].colorscale, 0.5, 0.0, 1.0) == "rgb(128, 128, 128)"


def test_heatmap_labels_fit_their_cells():
    # 24 columns across 640 px: 26.7 px a cell, 4 characters of 10 px (6.2 px each); a longer token is cut with "…"
    assert plots.cell_chars(24, 10) == 4 and plots.cell_chars(8, 11) == 11
    assert [plots.fit_label(t, 4) for t in (" First", " Then", "⏎", "  ")] == ["Fir…", "Then", "⏎", ""]
    text = [[" First", " Start", " Le", "4"] * 10]
    fig = heatmap_figure([[0.1] * 40], x=list(range(40)), y=["y1 ✓"], text=text, text_size=10, shown_cols=24)
    drawn = list(fig.data[1].text)
    assert drawn[:4] == ["Fir…", "Sta…", "Le", "4"] and all(len(t) <= 4 for t in drawn)
    assert list(fig.data[0].text[0][:2]) == ["Fir…", "Sta…"]  # the heatmap's hover shows what is drawn
    # the x axis opens on the 24 columns the labels are fitted to, a range slider under it for the rest
    assert list(fig.layout.xaxis.range) == [-0.5, 23.5] and fig.layout.xaxis.rangeslider.visible


def test_heatmap_row_labels_stand_off_the_cells_in_a_margin_that_holds_them():
    labels = ["c=7 · QAE K=0.4", "c=1 · GRPO mean"]
    fig = heatmap_figure([[1.0], [0.5]], x=["y1"], y=labels)
    assert fig.layout.yaxis.ticklabelstandoff >= 4
    assert fig.layout.margin.l >= plots.label_px(labels[0]) + fig.layout.yaxis.ticklabelstandoff
    short = heatmap_figure([[1.0]], x=["y1"], y=["K"])
    assert short.layout.margin.l == 60  # the usual margin where the labels need no more


def test_heatmap_colour_bar_has_a_title_and_the_range_given():
    fig = heatmap_figure([[0.2, 0.9]], x=[0, 1], y=["w"], zmid=None, zmin=0.0, zmax=1.0, colorbar_title="w_t")
    assert fig.data[0].colorbar.title.text == "w_t" and (fig.data[0].zmin, fig.data[0].zmax) == (0.0, 1.0)


def test_equal_series_stay_visible():
    fig = line_figure([0, 1, 2], {"discounted": [1, 2, 3], "easy failures": [1, 2, 3], "hard": [0, 0, 0]})
    under, over, other = fig.data
    assert over.line.dash == "dash" and under.line.width > over.line.width and under.opacity < 1
    assert other.line.dash is None and other.opacity is None  # a different series keeps the plain style
    fig = line_figure([0, 1], {"a": [1, 2], "b": [1, 2.5]})
    assert [t.line.dash for t in fig.data] == [None, None]


def test_vline_sits_at_its_value_on_log_and_linear_axes():
    log = line_figure([1, 10, 100, 500], {"err": [1, 0.1, 0.01, 0.0]}, log_x=True)
    plots.vline(log, 2, "k = 2")
    plots.vline(log, 470, "k = V = 470", dash="dash")
    assert [s.x0 for s in log.layout.shapes] == [2, 470]  # shapes: data units, even on a log axis
    assert [a.x for a in log.layout.annotations] == pytest.approx([math.log10(2), math.log10(470)])  # labels: log10
    assert [a.text for a in log.layout.annotations] == ["k = 2", "k = V = 470"]
    lin = plots.vline(line_figure([0, 1], {"a": [0, 1]}), 0.5, "paper α = 0.5")
    assert lin.layout.shapes[0].x0 == 0.5 and lin.layout.annotations[0].x == 0.5
    with pytest.raises(ValueError, match="x must be > 0 on a log axis"):
        plots.vline(log, 0, "zero")
    with pytest.raises(ValueError, match="side must be 'left' or 'right'"):
        plots.vline(log, 2, "k", side="up")


def test_run_curves_layout_keeps_titles_legends_and_labels_apart():
    from qae_lab.lab.live import LIVE_PANELS
    from qae_lab.lab.plots import LEGEND_PX, run_curves_figure

    rows = [{"step": s, "reward": s % 2, "qae/success_rate": s % 2, "entropy": 0.1, "qae/k": 0.4} for s in range(1, 6)]
    title = "step 5 of 400 · knobs in force:<br>steps 1-3: K 0.40<br>steps 4-5: K 0.60"
    fig = run_curves_figure(rows, LIVE_PANELS, title=title)
    n_rows = (len(LIVE_PANELS) + 1) // 2
    domains = sorted({fig.get_subplot(r, 1).yaxis.domain for r in range(1, n_rows + 1)}, reverse=True)
    plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    gaps_px = [(upper[0] - lower[1]) * plot_h for upper, lower in zip(domains, domains[1:])]
    # under a panel: its tick labels and "training step"; over the next: its title and its legend
    assert min(gaps_px) >= 100
    # the title's 3 lines (about 20 px each, from 10 px down) end above the first panels' titles and legends
    assert fig.layout.title.yref == "container" and (1 - fig.layout.title.y) * fig.layout.height == pytest.approx(24)
    assert fig.layout.margin.t >= 10 + 3 * 22 + 20 + LEGEND_PX
    reward, success = (t for t in fig.data if t.meta in ("reward", "qae/success_rate"))
    assert success.line.dash == "dash" and reward.line.width > success.line.width  # 0/1 rewards: equal curves


@pytest.mark.parametrize("x_title", ["", "correct responses c"])
def test_legend_sits_below_the_axis_title(x_title):
    fig = line_figure([0, 1], {"a": [0, 1], "b": [1, 0]}, title="t", x_title=x_title)
    plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    gap_px = -fig.layout.legend.y * plot_h
    assert fig.layout.legend.yanchor == "top" and gap_px >= (65 if x_title else 30)


def test_band_figure_keeps_equal_mean_curves_visible():
    from types import SimpleNamespace as C

    same = dict(steps=[1, 2, 3], mean=[30.8, 30.9, 30.8], std=[0.1, 0.1, 0.1], n_runs=3)
    fig = plots.band_figure({"mean": C(**same), "qae": C(**same), "sa_ah": C(**{**same, "mean": [31, 31, 31]})})
    lines = [t for t in fig.data if t.name]
    assert [t.line.dash for t in lines] == [None, "dash", None]
    assert lines[0].line.width > lines[1].line.width


def test_change_figure_one_bar_per_item_by_advantage_sign():
    fig = plots.change_figure(
        ["y0", "y1", "y2", "y3"], [-1, -2, -3, -4], [-0.5, -2.5, -3, -3.5], [1, -1, 0, 2], title="t", y_title="change"
    )
    assert [(t.name, list(t.x), list(t.y)) for t in fig.data] == [
        ("A > 0", ["y0", "y3"], [0.5, 0.5]),
        ("A = 0", ["y2"], [0.0]),
        ("A < 0", ["y1"], [-0.5]),
    ]
    assert list(fig.layout.xaxis.categoryarray) == ["y0", "y1", "y2", "y3"]  # the items' order, not the traces'
    assert [list(c) for c in fig.data[2].customdata] == [[-2.0, -2.5, -1.0]]  # before, after, A on hover
    with pytest.raises(ValueError, match="unique"):
        plots.change_figure(["y0", "y0"], [0, 0], [1, 1], [1, 1])
    with pytest.raises(ValueError, match="one value per label"):
        plots.change_figure(["y0", "y1"], [0], [1, 1], [1, 1])
