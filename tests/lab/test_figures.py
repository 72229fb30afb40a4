"""Tests for qae_lab.lab.figures: the figures' traces and axes, and what a reader sees (titles, legends, labels)."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import pytest

from qae_lab.lab import figures
from qae_lab.lab.figures import bar_figure, heatmap_figure, line_figure


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


def test_long_titles_wrap_at_words_and_short_ones_stay():
    title = (
        "w_t at α = 0.5, prompt 3 (top: SA-AH, bottom: AH) · batch: mean w on A<0 tokens 0.910, effective tokens 0.957"
    )
    lines = figures.wrap_title(title).split("<br>")
    assert len(lines) == 2 and all(len(line) <= figures.TITLE_CHARS for line in lines)
    assert " ".join(lines) == title  # nothing lost, broken only at spaces
    assert figures.wrap_title("a b c", width=10) == "a b c"
    assert figures.wrap_title("aaaa bbbb<br>cc", width=10) == "aaaa bbbb<br>cc"  # an explicit break stays
    with pytest.raises(ValueError, match="width must be >= 10"):
        figures.wrap_title("x", width=3)
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


def test_text_colour_follows_the_cells_luminance_hand_computed():
    # WCAG: L = 0.2126 R + 0.7152 G + 0.0722 B of the linearised channels; contrast (L1 + 0.05) / (L2 + 0.05).
    # #808080: each channel 128/255 -> ((0.502 + 0.055) / 1.055) ** 2.4 = 0.2159 = L; #1a1a1a: L = 0.0103.
    # dark text: (0.2159 + 0.05) / (0.0103 + 0.05) = 4.41; white: 1.05 / 0.2659 = 3.95 -> dark.
    # #767676 (118): L = 0.1812; dark: 0.2312 / 0.0603 = 3.83; white: 1.05 / 0.2312 = 4.54 -> white.
    assert figures.relative_luminance("#808080") == pytest.approx(0.2159, abs=1e-4)
    assert figures.relative_luminance("#1a1a1a") == pytest.approx(0.0103, abs=1e-4)
    assert figures.text_colour("#808080") == figures.TEXT_DARK and figures.text_colour("#767676") == figures.TEXT_LIGHT
    assert figures.text_colour("rgb(253, 231, 37)") == figures.TEXT_DARK  # Viridis' yellow: dark, as a reader expects
    assert figures.text_colour("rgb(103,0,31)") == figures.TEXT_LIGHT  # RdBu's darkest red: white
    with pytest.raises(ValueError, match="colour must be"):
        figures.text_colour("red")


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
    assert list(fig.data[1].textfont.color) == [
        figures.TEXT_LIGHT,
        figures.TEXT_DARK,
        figures.TEXT_DARK,
        figures.TEXT_DARK,
    ]
    assert figures.scale_colour(fig.data[0].colorscale, 0.5, 0.0, 1.0) == "rgb(128, 128, 128)"


def test_heatmap_labels_fit_their_cells():
    # 24 columns across 640 px: 26.7 px a cell, 4 characters of 10 px (6.2 px each); a longer token is cut with "…"
    assert figures.cell_chars(24, 10) == 4 and figures.cell_chars(8, 11) == 11
    assert [figures.fit_label(t, 4) for t in (" First", " Then", "⏎", "  ")] == ["Fir…", "Then", "⏎", ""]
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
    assert fig.layout.margin.l >= figures.label_px(labels[0]) + fig.layout.yaxis.ticklabelstandoff
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
    figures.vline(log, 2, "k = 2")
    figures.vline(log, 470, "k = V = 470", dash="dash")
    assert [s.x0 for s in log.layout.shapes] == [2, 470]  # shapes: data units, even on a log axis
    assert [a.x for a in log.layout.annotations] == pytest.approx([math.log10(2), math.log10(470)])  # labels: log10
    assert [a.text for a in log.layout.annotations] == ["k = 2", "k = V = 470"]
    lin = figures.vline(line_figure([0, 1], {"a": [0, 1]}), 0.5, "paper α = 0.5")
    assert lin.layout.shapes[0].x0 == 0.5 and lin.layout.annotations[0].x == 0.5
    with pytest.raises(ValueError, match="x must be > 0 on a log axis"):
        figures.vline(log, 0, "zero")
    with pytest.raises(ValueError, match="side must be 'left' or 'right'"):
        figures.vline(log, 2, "k", side="up")


@pytest.mark.parametrize("x_title", ["", "correct responses c"])
def test_legend_sits_below_the_axis_title(x_title):
    fig = line_figure([0, 1], {"a": [0, 1], "b": [1, 0]}, title="t", x_title=x_title)
    plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    gap_px = -fig.layout.legend.y * plot_h
    assert fig.layout.legend.yanchor == "top" and gap_px >= (65 if x_title else 30)


def test_band_figure_keeps_equal_mean_curves_visible():
    from types import SimpleNamespace as C

    same = dict(steps=[1, 2, 3], mean=[30.8, 30.9, 30.8], std=[0.1, 0.1, 0.1], n_runs=3)
    fig = figures.band_figure({"mean": C(**same), "qae": C(**same), "sa_ah": C(**{**same, "mean": [31, 31, 31]})})
    lines = [t for t in fig.data if t.name]
    assert [t.line.dash for t in lines] == [None, "dash", None]
    assert lines[0].line.width > lines[1].line.width
