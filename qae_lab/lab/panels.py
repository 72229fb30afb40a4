r"""The training-curve panels of a live run's dashboard and of ``report.html``: :func:`run_curves_figure`."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from qae_lab.lab.figures import line_styles, title_layout
from qae_lab.labels import CURVES, PALETTE, RUN_CURVES


LEGEND_PX = 24  # a panel's legend: one row of names between its title and its plot area


def curve_style(metric: str) -> tuple[str, str, str]:
    r"""``(name, unit, colour)`` of a logged metric (:data:`CURVES`); else its key, no unit, a colour hashed from it.

    >>> curve_style("qae/easy_frac")
    ('easy share', 'share of prompts', '#2ca02c')
    >>> curve_style("my/metric") == curve_style("my/metric")
    True
    """
    if metric in CURVES:
        return CURVES[metric]
    return metric, "", PALETTE[zlib.crc32(metric.encode()) % len(PALETTE)]


def _panel_traces(rows: Sequence[Mapping], keys: Sequence[str], legend: str) -> list[go.Scatter]:
    """One line per logged metric of ``keys``; none logged: one missing point per metric, so the legend names them."""
    curves = [(key, [(row["step"], float(row[key])) for row in rows if row.get(key) is not None]) for key in keys]
    drawn = [(key, pts) for key, pts in curves if pts]
    styles = line_styles([pts for _, pts in drawn]) if drawn else [{} for _ in keys]
    traces = []
    for (key, pts), style in zip(drawn or [(key, [(None, None)]) for key in keys], styles):
        name, _, colour = curve_style(key)
        traces.append(
            go.Scatter(
                x=[p[0] for p in pts],
                y=[p[1] for p in pts],
                name=name,
                meta=key,  # the logged metric, for readers of the figure
                legend=legend,
                showlegend=True,
                mode="lines",
                opacity=style.pop("opacity", None),
                line={"color": colour, "width": 2, **style},
                hovertemplate=f"{name}<br>step %{{x}}: %{{y:.3g}}<extra></extra>",
            )
        )
    return traces


def _panel_unit(keys: Sequence[str]) -> str:
    """The y-axis title of a panel: its metrics' units, each once."""
    return " · ".join(dict.fromkeys(u for u in (curve_style(k)[1] for k in keys) if u))


def _add_panel(fig: go.Figure, i: int, keys: Sequence[str], rows: Sequence[Mapping], note: str) -> None:
    """Panel ``i`` of a :func:`run_curves_figure`: lines, legend, units and, where nothing is logged, ``note``."""
    r, c = i // 2 + 1, i % 2 + 1
    legend = "legend" if i == 0 else f"legend{i + 1}"
    traces = _panel_traces(rows, keys, legend)
    for trace in traces:
        fig.add_trace(trace, row=r, col=c)
    panel = fig.get_subplot(r, c)
    x0, top = panel.xaxis.domain[0], panel.yaxis.domain[1]
    fig.update_layout({legend: {"orientation": "h", "x": x0, "xanchor": "left", "y": top, "yanchor": "bottom"}})
    fig.layout[legend].update(font={"size": 12}, bgcolor="rgba(255,255,255,0)")
    fig.layout.annotations[i].update(yshift=LEGEND_PX, font={"size": 14})  # the panel's title, above its legend
    fig.update_yaxes(title_text=_panel_unit(keys), title_font={"size": 11}, row=r, col=c)
    fig.update_xaxes(title_text="training step", title_standoff=2, title_font={"size": 11}, row=r, col=c)
    share = all(curve_style(k)[1].startswith("share") for k in keys)
    if share:
        fig.update_yaxes(range=[-0.03, 1.03], row=r, col=c)  # a share: the whole of 0..1, the same at every redraw
    if all(x is None for t in traces for x in t.x):  # no numbers made up on its axes; the note in paper coordinates
        fig.update_xaxes(range=[0, 10], showticklabels=False, row=r, col=c)
        fig.update_yaxes(showticklabels=share, row=r, col=c)
        fig.add_annotation(
            text=note,
            showarrow=False,
            xref="paper",
            yref="paper",
            xanchor="center",
            yanchor="middle",
            x=sum(panel.xaxis.domain) / 2,
            y=sum(panel.yaxis.domain) / 2,
            font={"size": 13, "color": "#555"},
        )


def run_curves_figure(
    rows: Sequence[Mapping],
    panels: Mapping[str, Sequence[str]] = RUN_CURVES,
    *,
    title: str = "",
    notes: Mapping[str, str] | None = None,
    height_per_row: int = 280,
) -> go.Figure:
    r"""Training curves from log rows (dicts with ``step`` and metrics), one panel per entry of ``panels``.

    Each panel has its own legend in plain words (:data:`CURVES`), a metric one colour everywhere; a panel with
    nothing logged shows its note from ``notes``, else "not logged in this run".

    >>> fig = run_curves_figure([{"step": 1, "reward": 0.2}, {"step": 2, "reward": 0.4}], {"reward": ("reward",)})
    >>> list(fig.data[0].x), list(fig.data[0].y), fig.data[0].name, fig.data[0].line.color
    ([1, 2], [0.2, 0.4], 'mean reward', '#1f77b4')
    """
    names, notes = list(panels), dict(notes or {})
    n_rows = (len(names) + 1) // 2
    layout_title, _ = title_layout(title)
    lines = layout_title["text"].count("<br>") + 1 if title else 0
    # px: the title's lines, then the first panels' titles and legends; "training step" below
    top, bottom, gap = 12 + 22 * lines + 28 + LEGEND_PX, 50, 105
    height = height_per_row * n_rows + top + bottom
    plot_h = height - top - bottom
    # the title's first line 10 px from the top (plotly.js anchors a title of several lines by its first line)
    layout_title.update(yref="container", y=1 - 24 / height, yanchor="bottom")
    fig = make_subplots(
        rows=n_rows,
        cols=2,
        subplot_titles=names,
        horizontal_spacing=0.1,
        vertical_spacing=min(gap / plot_h, 0.9 / max(n_rows - 1, 1)) if n_rows > 1 else 0,
    )
    for i, (name, keys) in enumerate(panels.items()):
        _add_panel(fig, i, keys, rows, notes.get(name, "not logged in this run"))
    fig.update_layout(
        title=layout_title,
        height=height,
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": top, "b": bottom},
    )
    return fig
