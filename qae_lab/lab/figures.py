r"""Plotly figures for the notebooks: lines, bands, bars and heatmaps, each a plain ``go.Figure``.

Titles wrap instead of being cut at the figure's edge, legends sit below the axis titles, a curve equal to another is
drawn dashed over it, and a heatmap's cell labels fit their cells in a colour that reads on them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from qae_lab.labels import PALETTE


TITLE_CHARS = 80  # a title line longer than this wraps: plotly.js cuts titles at the figure's edge
TITLE_SIZE = 15


def wrap_title(title: str, width: int = TITLE_CHARS) -> str:
    r"""``title`` broken at spaces into ``<br>``-joined lines of at most ``width`` characters.

    >>> wrap_title("w_t at alpha = 0.5, prompt 3 (top: SA-AH, bottom: AH)", width=30)
    'w_t at alpha = 0.5, prompt 3<br>(top: SA-AH, bottom: AH)'
    >>> wrap_title("short")
    'short'
    """
    if width < 10:
        raise ValueError(f"width must be >= 10 characters, got {width}")
    lines: list[str] = []
    for part in title.split("<br>"):
        line = ""
        for word in part.split(" "):
            if line and len(line) + 1 + len(word) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "<br>".join(lines)


def title_layout(title: str) -> tuple[dict, int]:
    """The layout's title (wrapped) and the top margin in px that its lines need."""
    text = wrap_title(title) if title else ""
    return {"text": text, "font": {"size": TITLE_SIZE}}, 30 + 22 * (text.count("<br>") + 1) if text else 30


def _legend_below(px: int, plot_h: int) -> dict:
    """A horizontal legend whose top sits ``px`` pixels under a plot area ``plot_h`` pixels high."""
    return {"orientation": "h", "yanchor": "top", "y": -px / plot_h}


def finish_layout(fig: go.Figure, title: str, x_title: str, y_title: str, height: int) -> go.Figure:
    layout_title, top = title_layout(title)
    below = 92 if x_title else 40  # px under the plot area: tick labels (and the axis title), then the legend
    # the bottom margin holds a legend row too: else plotly widens it and the legend climbs onto the axis title
    bottom = below + 30
    height += top - 60 + bottom - 50
    fig.update_layout(
        title=layout_title,
        xaxis_title=x_title,
        yaxis_title=y_title,
        height=height,
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": top, "b": bottom},
        legend=_legend_below(below, height - top - bottom),
    )
    return fig


def line_styles(ys: Sequence[Sequence[float]]) -> list[dict]:
    """Line styles that keep every series visible: one equal to an earlier one is dashed over it, widened and paler."""
    ys = [list(y) for y in ys]
    styles = [{} for _ in ys]
    for j, y in enumerate(ys):
        first = next((i for i in range(j) if ys[i] == y), None)
        if first is not None:
            styles[j] = {"dash": "dash", "width": 2}
            styles[first] = {"width": 6, "opacity": 0.45}
    return styles


def vline(fig: go.Figure, x: float, text: str, dash: str = "dot", side: str = "right") -> go.Figure:
    r"""A vertical line at data value ``x`` with ``text`` at its top, on the ``side`` of the line.

    On a log axis plotly reads an annotation's x in log10 units (``add_vline``'s label would land at 10^x).

    >>> fig = vline(line_figure([1, 10, 100], {"a": [1, 2, 3]}, log_x=True), 2, "k = 2")
    >>> fig.layout.shapes[0].x0, round(fig.layout.annotations[0].x, 4)
    (2, 0.301)
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    log = fig.layout.xaxis.type == "log"
    if log and not x > 0:
        raise ValueError(f"x must be > 0 on a log axis, got {x}")
    fig.add_vline(x=x, line_dash=dash, line_color="#444", line_width=1)
    fig.add_annotation(
        x=math.log10(x) if log else x,
        y=1,
        xref="x",
        yref="paper",
        text=text,
        showarrow=False,
        xanchor="left" if side == "right" else "right",
        xshift=4 if side == "right" else -4,
        yanchor="top",
        bgcolor="rgba(255,255,255,0.8)",
    )
    return fig


def add_band(
    fig: go.Figure,
    x: list,
    y: list[float],
    half: list[float],
    color: str,
    *,
    legendgroup: str | None = None,
    row: int | None = None,
    col: int | None = None,
) -> None:
    """A shaded y +- half band behind a line, without a legend entry (in the line's ``legendgroup``)."""
    upper, lower = [a + h for a, h in zip(y, half)], [a - h for a, h in zip(y, half)]
    fig.add_trace(
        go.Scatter(
            x=x + x[::-1],
            y=upper + lower[::-1],
            fill="toself",
            fillcolor=color,
            opacity=0.2,
            line={"width": 0},
            hoverinfo="skip",
            showlegend=False,
            legendgroup=legendgroup,
        ),
        row=row,
        col=col,
    )


def add_band_line(
    fig: go.Figure,
    x: list,
    mean: list,
    std: list,
    color: str,
    name: str,
    group: str,
    col: int,
    mode: str = "lines",
    legend: bool | None = None,
) -> None:
    """A mean line over its +- std band in subplot (1, ``col``), legend-grouped by ``group``, in the legend once:
    from the first subplot (``legend`` None), or where ``legend`` says."""
    add_band(fig, x, mean, std, color, legendgroup=group, row=1, col=col)
    shown = col == 1 if legend is None else legend
    line = go.Scatter(x=x, y=mean, mode=mode, line={"color": color}, legendgroup=group, name=name, showlegend=shown)
    fig.add_trace(line, row=1, col=col)


def line_figure(
    x: Sequence,
    series: Mapping[str, Sequence],
    *,
    title: str = "",
    x_title: str = "",
    y_title: str = "",
    log_x: bool = False,
    log_y: bool = False,
    markers: bool = False,
    bands: Mapping[str, Sequence] | None = None,
    height: int = 380,
) -> go.Figure:
    r"""Lines sharing one x axis: ``series`` maps a legend name to its y values, ``bands`` to a +- half-width.

    >>> fig = line_figure([1, 2, 3], {"a": [1, 4, 9]}, title="squares")
    >>> fig.data[0].name, list(fig.data[0].y)
    ('a', [1.0, 4.0, 9.0])

    >>> [t.line.dash for t in line_figure([0, 1], {"a": [1, 2], "b": [1, 2]}).data]  # equal lines (line_styles)
    [None, 'dash']
    """
    fig = go.Figure()
    x = list(x)
    ys = [[float(v) for v in y] for y in series.values()]
    for i, (name, y, style) in enumerate(zip(series, ys, line_styles(ys))):
        color = PALETTE[i % len(PALETTE)]
        if bands and name in bands:
            add_band(fig, x, y, [float(v) for v in bands[name]], color)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                name=name,
                mode="lines+markers" if markers else "lines",
                opacity=style.pop("opacity", None),
                line={"color": color, **style},
            )
        )
    fig.update_xaxes(type="log" if log_x else "linear")
    fig.update_yaxes(type="log" if log_y else "linear")
    return finish_layout(fig, title, x_title, y_title, height)


def band_figure(
    curves: Mapping[str, object],
    *,
    title: str = "",
    y_title: str = "",
    x_title: str = "step",
    stride: int = 1,
    height: int = 380,
) -> go.Figure:
    r"""Each method's mean curve over seeds with a +- one-std band (:class:`qae_lab.analysis.compare.Curve`).

    ``curves`` (:func:`qae_lab.analysis.compare.metric_curves`): each drawn every ``stride``-th of its own steps; a
    curve of one run has no band.

    >>> from types import SimpleNamespace as C
    >>> fig = band_figure({"qae": C(steps=[1, 2], mean=[0.5, 0.6], std=[0.1, 0.1], n_runs=3)})
    >>> [t.name for t in fig.data], list(fig.data[0].y)  # the band (hidden from the legend), then the line
    ([None, 'qae (3 runs)'], [0.6, 0.7, 0.5, 0.4])
    """
    fig = go.Figure()
    points = [list(zip(list(c.steps)[::stride], [float(v) for v in c.mean][::stride])) for c in curves.values()]
    for i, ((name, c), pts, style) in enumerate(zip(curves.items(), points, line_styles(points))):
        color, x, mean = PALETTE[i % len(PALETTE)], [p[0] for p in pts], [p[1] for p in pts]
        if c.n_runs > 1:
            add_band(fig, x, mean, [float(v) for v in c.std][::stride], color)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=mean,
                mode="lines",
                opacity=style.pop("opacity", None),
                line={"color": color, **style},
                name=f"{name} ({c.n_runs} run{'s' if c.n_runs != 1 else ''})",
            )
        )
    return finish_layout(fig, title, x_title, y_title, height)


# a heatmap's cell labels: dark on a light cell, white on a dark one (text_colour), fitted to their cells (fit_label)
TEXT_DARK, TEXT_LIGHT = "#1a1a1a", "#ffffff"
CHAR_EM = 0.62  # a character's width in em in plotly's sans-serif (Open Sans, then Arial), digits and capitals included
PLOT_PX = 640  # the plot area a heatmap's labels are fitted to: a notebook column less its margins (wider: more room)
TICK_SIZE = 12  # px: plotly's tick labels
STANDOFF = 8  # px between a row's label and its cells


def _rgb(colour: str) -> tuple[float, float, float]:
    """``#rrggbb``, ``rgb(r, g, b)`` or ``rgba(r, g, b, a)`` as (r, g, b), each 0..255."""
    colour = colour.strip()
    if colour.startswith("#") and len(colour) == 7:
        return tuple(float(int(colour[i : i + 2], 16)) for i in (1, 3, 5))
    if colour.startswith(("rgb(", "rgba(")):
        return tuple(float(v) for v in colour[colour.index("(") + 1 : -1].split(",")[:3])
    raise ValueError(f"colour must be '#rrggbb' or 'rgb(r, g, b)', got {colour!r}")


def relative_luminance(colour: str) -> float:
    r"""WCAG 2's relative luminance of ``colour``: 0 for black, 1 for white.

    >>> round(relative_luminance("#fde725"), 3), round(relative_luminance("#440154"), 3)  # Viridis' top and bottom
    (0.782, 0.019)
    """

    def linear(c: float) -> float:  # an sRGB channel, 0..255, as linear light
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in _rgb(colour))
    # L = 0.2126 R + 0.7152 G + 0.0722 B
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def text_colour(background: str) -> str:
    r""":data:`TEXT_DARK` or :data:`TEXT_LIGHT`, whichever has the higher WCAG contrast ratio on ``background``.

    >>> text_colour("#fde725"), text_colour("#440154"), text_colour("#808080"), text_colour("#767676")
    ('#1a1a1a', '#ffffff', '#1a1a1a', '#ffffff')
    """
    bg = relative_luminance(background)

    def ratio(text: str) -> float:
        lo, hi = sorted((bg, relative_luminance(text)))
        return (hi + 0.05) / (lo + 0.05)

    return TEXT_DARK if ratio(TEXT_DARK) >= ratio(TEXT_LIGHT) else TEXT_LIGHT


def scale_colour(colorscale: Sequence[Sequence], z: float, zmin: float, zmax: float) -> str:
    r"""The colour a heatmap paints ``z`` with: ``colorscale``'s stops interpolated at (z - zmin) / (zmax - zmin).

    >>> scale_colour([(0.0, "#000000"), (1.0, "rgb(255, 255, 255)")], 0.25, 0.0, 1.0)
    'rgb(64, 64, 64)'
    """
    pos = min(max((z - zmin) / (zmax - zmin), 0.0), 1.0) if zmax > zmin else 0.0
    stops = [(float(p), _rgb(c)) for p, c in colorscale]
    for (p0, c0), (p1, c1) in zip(stops, stops[1:]):
        if p0 <= pos <= p1:
            f = (pos - p0) / (p1 - p0) if p1 > p0 else 0.0
            return "rgb({}, {}, {})".format(*(round(a + f * (b - a)) for a, b in zip(c0, c1)))
    return "rgb({}, {}, {})".format(*(round(v) for v in stops[-1][1]))


def fit_label(text: str, width: int) -> str:
    r"""``text`` without its outer spaces, cut to at most ``width`` characters, a cut one ending in "…".

    >>> fit_label(" First", 4), fit_label(" Add", 4), fit_label("Wait", 4), fit_label(" ", 4)
    ('Fir…', 'Add', 'Wait', '')
    """
    text = text.strip()
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def cell_chars(n_cols: int, text_size: int, plot_px: int = PLOT_PX) -> int:
    r"""How many characters of ``text_size`` px fit in one of ``n_cols`` cells across ``plot_px`` px.

    >>> cell_chars(8, 11), cell_chars(24, 10)
    (11, 4)
    """
    return int(plot_px / max(n_cols, 1) // (CHAR_EM * text_size))


def label_px(text: str, size: int = TICK_SIZE) -> float:
    """About how many px ``text`` takes at ``size`` px (:data:`CHAR_EM` per character)."""
    return len(str(text)) * CHAR_EM * size


def _z_range(z: Sequence[Sequence[float]], zmid: float | None, zmin: float | None, zmax: float | None):
    """The colour scale's (zmin, zmax): as given, else the finite cells' extremes, spread evenly about ``zmid``."""
    cells = [v for row in z for v in row if math.isfinite(v)] or [0.0]
    lo, hi = min(cells) if zmin is None else zmin, max(cells) if zmax is None else zmax
    if zmid is not None and zmin is None and zmax is None:
        half = max(hi - zmid, zmid - lo)
        lo, hi = zmid - half, zmid + half
    return (lo, hi) if hi > lo else (lo, lo + 1.0)


def _cell_labels(fig: go.Figure, labels: list[list[str]], text_size: int) -> None:
    """Draw the heatmap's non-empty cell ``labels`` over it as one text trace, each in a colour that reads on it."""
    hm = fig.data[0]
    xs, ys, texts, colours = [], [], [], []
    for y, row, zs in zip(hm.y, labels, hm.z):
        for x, label, z in zip(hm.x, row, zs):
            if label:
                bg = scale_colour(hm.colorscale, z, hm.zmin, hm.zmax) if math.isfinite(z) else "#ffffff"
                xs.append(x), ys.append(y), texts.append(label), colours.append(text_colour(bg))
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            text=texts,
            mode="text",
            textfont={"size": text_size, "color": colours},
            hoverinfo="skip",
            showlegend=False,
        )
    )


def heatmap_figure(
    z: Sequence[Sequence[float]],
    x: Sequence,
    y: Sequence,
    *,
    title: str = "",
    x_title: str = "",
    y_title: str = "",
    text: Sequence[Sequence[str]] | None = None,
    colorscale="RdBu",
    zmid: float | None = 0.0,
    zmin: float | None = None,
    zmax: float | None = None,
    colorbar_title: str = "",
    height: int = 420,
    text_size: int = 11,
    shown_cols: int | None = None,
) -> go.Figure:
    r"""A heatmap of z[row][col], rows labelled by ``y``, columns by ``x``, over [zmin, zmax] (default: the cells'
    range, even about ``zmid``).

    ``text`` is written in the cells, fitted to them (:func:`fit_label`) in a colour that reads on each;
    ``shown_cols``: the x axis opens on that many columns, a range slider under it. Labels must be unique: plotly
    merges rows (or columns) that share one, hiding data without a word.

    >>> fig = heatmap_figure([[1, -1]], x=[0, 1], y=["K=0.4"], text=[["up", "down"]], colorbar_title="A")
    >>> [t.type for t in fig.data], (fig.data[0].zmin, fig.data[0].zmax), fig.data[0].colorbar.title.text
    (['heatmap', 'scatter'], (-1.0, 1.0), 'A')
    >>> list(fig.data[1].text), list(fig.data[1].textfont.color)  # dark blue at +1, dark red at -1: white on both
    (['up', 'down'], ['#ffffff', '#ffffff'])
    >>> heatmap_figure([[1], [2]], x=[0], y=["p=1/8", "p=1/8"])
    Traceback (most recent call last):
    ...
    ValueError: y labels must be unique (plotly merges rows with one label): 'p=1/8' appears 2 times
    """
    x, y = list(x), list(y)
    for name, labels in (("x", x), ("y", y)):
        label, n = Counter(labels).most_common(1)[0] if labels else (None, 0)
        if n > 1:
            what = "rows" if name == "y" else "columns"
            raise ValueError(
                f"{name} labels must be unique (plotly merges {what} with one label): {label!r} appears {n} times"
            )
    rows = [list(map(float, row)) for row in z]
    lo, hi = _z_range(rows, zmid, zmin, zmax)
    width = cell_chars(min(shown_cols or len(x), len(x)), text_size)
    labels = [[fit_label(str(s), width) for s in row] for row in text] if text is not None else None
    fig = go.Figure(
        go.Heatmap(
            z=rows,
            x=x,
            y=y,
            text=labels,
            colorscale=colorscale,
            zmin=lo,
            zmax=hi,
            colorbar={"title": {"text": colorbar_title, "side": "right"}},
        )
    )
    if labels is not None:
        _cell_labels(fig, labels, text_size)
    finish_layout(fig, title, x_title, y_title, height)
    left = label_px(max(map(str, y), key=len, default="")) + STANDOFF + (28 if y_title else 0) + 12
    fig.update_layout(margin_l=max(60, math.ceil(left)))
    fig.update_yaxes(ticklabelstandoff=STANDOFF)
    if shown_cols is not None and shown_cols < len(x):
        start = x[0] if isinstance(x[0], (int, float)) else 0
        fig.update_layout(
            xaxis_range=[start - 0.5, start + shown_cols - 0.5], xaxis_rangeslider={"visible": True, "thickness": 0.1}
        )
        if labels is not None:  # the labels on a twin of the x axis: they follow its range, the slider leaves them out
            fig.update_traces(xaxis="x2", selector={"mode": "text"})
            fig.update_layout(xaxis2={"overlaying": "x", "matches": "x", "visible": False})
    return fig


def bar_figure(
    categories: Sequence,
    series: Mapping[str, Sequence],
    *,
    title: str = "",
    x_title: str = "",
    y_title: str = "",
    height: int = 360,
) -> go.Figure:
    r"""Grouped bars: ``series`` maps a legend name to one value per category.

    >>> len(bar_figure(["a", "b"], {"mean": [1, 2], "quantile": [0, 1]}).data)
    2
    """
    fig = go.Figure(
        [
            go.Bar(x=list(categories), y=[float(v) for v in ys], name=name, marker_color=PALETTE[i % len(PALETTE)])
            for i, (name, ys) in enumerate(series.items())
        ]
    )
    fig.update_layout(barmode="group")
    return finish_layout(fig, title, x_title, y_title, height)
