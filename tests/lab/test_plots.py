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
    (hm,) = fig.data
    assert hm.type == "heatmap"
    assert [list(row) for row in hm.z] == [[0.0, 1.0, -1.0], [2.0, 0.0, 1.0]]
    assert list(hm.x) == [0, 1, 2] and list(hm.y) == ["K=0.4", "K=0.6"]
    assert hm.texttemplate == "%{text}" and [list(row) for row in hm.text] == [["a", "b", "c"]] * 2
    assert hm.zmid == 0.0 and fig.layout.title.text == "gate"
    plain = heatmap_figure([[1.0]], x=[0], y=[0], zmid=None, zmin=-1, zmax=1)
    assert plain.data[0].text is None and plain.data[0].texttemplate is None
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
    (hm,) = fig.data
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


def test_run_curves_figure_panels_and_not_logged_note():
    from qae_lab.lab.plots import run_curves_figure

    rows = [
        {"step": 1, "reward": 0.2, "qae/k": 0.4, "entropy": None},
        {"step": 2, "reward": 0.4, "qae/k": 0.7, "entropy": 0.5},
    ]
    panels = {"reward": ("reward",), "entropy": ("entropy",), "alpha": ("saah/alpha",), "K": ("qae/k",)}
    fig = run_curves_figure(rows, panels)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["entropy"].x) == [2]  # a None value is skipped, not drawn as 0
    assert (by_name["reward"].xaxis, by_name["entropy"].xaxis, by_name["qae/k"].xaxis) == ("x", "x2", "x4")
    (note,) = [a for a in fig.layout.annotations if a.text == "not logged in this run"]
    alpha_panel = fig.get_subplot(2, 1)  # the third panel: row 2, column 1
    assert note.xref == "paper" and alpha_panel.xaxis.domain[0] < note.x < alpha_panel.xaxis.domain[1]
    assert alpha_panel.yaxis.domain[0] < note.y < alpha_panel.yaxis.domain[1]


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
    hm = heatmap_figure([[1.0, 0.5]], x=[0, 1], y=["a"], text=[["The", " coins"]]).data[0]
    assert hm.textfont.size == 11 and list(hm.text[0]) == ["The", " coins"]  # a fixed size, not shrunk to dots


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


def test_run_curves_layout_keeps_titles_labels_and_legend_apart():
    from qae_lab.lab.live import LIVE_PANELS
    from qae_lab.lab.plots import run_curves_figure

    rows = [{"step": s, "reward": s % 2, "qae/success_rate": s % 2, "entropy": 0.1, "qae/k": 0.4} for s in range(1, 6)]
    fig = run_curves_figure(rows, LIVE_PANELS, title="step 5 / 400: K = 0.40")
    n_rows = (len(LIVE_PANELS) + 1) // 2
    domains = sorted({fig.get_subplot(r, 1).yaxis.domain for r in range(1, n_rows + 1)}, reverse=True)
    plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    gaps_px = [(upper[0] - lower[1]) * plot_h for upper, lower in zip(domains, domains[1:])]
    assert min(gaps_px) >= 60  # room for the tick labels and the next panel's title
    titled = [ax for ax in fig.layout if ax.startswith("xaxis") and fig.layout[ax].title.text == "step"]
    assert sorted(titled) == [f"xaxis{2 * n_rows - 1}", f"xaxis{2 * n_rows}"]  # "step" under the bottom panels only
    assert fig.layout.legend.yanchor == "top" and fig.layout.legend.y * plot_h <= -40  # below the "step" titles
    reward, success = (t for t in fig.data if t.name in ("reward", "qae/success_rate"))
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
