"""Tests for qae_lab.lab.panels: the training-curve panels, their legends, units, colours and notes."""

from __future__ import annotations

import pytest

from qae_lab.labels import PALETTE


def test_run_curves_figure_panels_and_notes():
    from qae_lab.lab.panels import run_curves_figure

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
    from qae_lab.lab.panels import CURVES, curve_style, run_curves_figure

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
    assert curve_style("my/metric")[0] == "my/metric" and curve_style("my/metric")[2] in PALETTE


def test_run_curves_legend_per_panel_units_and_shares():
    from qae_lab.lab.live import LIVE_PANELS
    from qae_lab.lab.panels import LEGEND_PX, run_curves_figure

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


def test_run_curves_layout_keeps_titles_legends_and_labels_apart():
    from qae_lab.lab.live import LIVE_PANELS
    from qae_lab.lab.panels import LEGEND_PX, run_curves_figure

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
