r"""Plotly figures for the notebooks, and the views that re-draw them in place when a control moves.

Every function returns a plain ``plotly.graph_objects.Figure``; the notebooks only call them.
Titles wrap instead of being cut at the figure's edge, legends sit below the axis titles, and a
curve equal to another is drawn dashed over it, so that what a title or legend names can be seen.

Implementer's notes: docs/implementation.md, section ``qae_lab.lab.plots``.
"""

from __future__ import annotations

import math
import os
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import IPython
import ipywidgets as widgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from qae_lab.analysis.tables import markdown_table
from qae_lab.labels import CURVES, PALETTE, RUN_CURVES

__all__ = [
    "wrap_title",
    "vline",
    "line_figure",
    "band_figure",
    "heatmap_figure",
    "text_colour",
    "fit_label",
    "bar_figure",
    "change_figure",
    "VERDICT_COLOURS",
    "differences_figure",
    "gate_heatmap",
    "run_curves_figure",
    "RUN_CURVES",
    "CURVES",
    "curve_style",
    "figure_widget_supported",
    "plot_mode",
    "FigureView",
    "interactive",
]


def _env_mode() -> str:
    """``QAE_LAB_PLOTS`` (default ``auto``), checked."""
    mode = os.environ.get("QAE_LAB_PLOTS", "auto").strip().lower()
    if mode not in ("auto", "widget", "static"):
        raise ValueError(f"QAE_LAB_PLOTS must be one of 'auto', 'widget', 'static', got {mode!r}")
    return mode


def figure_widget_supported() -> bool:
    r"""Whether ``go.FigureWidget`` can be expected to render here.

    False in Colab (its ipywidgets 7.7 front end shows no FigureWidget), where the
    environment forces ``QAE_LAB_PLOTS=static``, or where building one fails (plotly 6
    without anywidget). ``QAE_LAB_PLOTS=widget`` forces True.

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"QAE_LAB_PLOTS": "static"}):
    ...     figure_widget_supported()
    False
    >>> with mock.patch.dict(os.environ, {"QAE_LAB_PLOTS": "Widget"}):
    ...     figure_widget_supported()
    True
    """
    mode = _env_mode()
    if mode != "auto":
        return mode == "widget"
    if "google.colab" in sys.modules:
        return False
    try:
        go.FigureWidget()
    except Exception:  # plotly raises ImportError or ValueError when its widget stack is missing
        return False
    return True


def plot_mode() -> str:
    r"""What :class:`FigureView`'s ``mode="auto"`` picks: ``"widget"`` only where ``QAE_LAB_PLOTS=widget``
    asks for a FigureWidget, ``"static"`` (a plain figure, sized to the column) otherwise.

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"QAE_LAB_PLOTS": "auto"}):
    ...     plot_mode()
    'static'
    >>> with mock.patch.dict(os.environ, {"QAE_LAB_PLOTS": "widget"}):
    ...     plot_mode()
    'widget'
    """
    # asked first: only then is a FigureWidget worth building (every view would otherwise build one to test)
    return "widget" if _env_mode() == "widget" and figure_widget_supported() else "static"


class FigureView:
    r"""Shows a figure and replaces it in place when :meth:`update` is called.

    Attributes:
        widget: the ipywidgets object to display (a FigureWidget or an Output).
        figure: the plain ``go.Figure`` shown last (what tests and exercises inspect).
        mode: ``"widget"`` or ``"static"`` (``"auto"``: :func:`plot_mode`).

    >>> from qae_lab.lab.plots import line_figure
    >>> view = FigureView(line_figure([0, 1], {"a": [0, 1]}), mode="static")
    >>> view.update(line_figure([0, 1], {"b": [1, 0]})); view.figure.data[0].name
    'b'
    """

    def __init__(self, fig: go.Figure | None = None, mode: str = "auto"):
        if mode not in ("auto", "widget", "static"):
            raise ValueError(f"mode must be 'auto', 'widget' or 'static', got {mode!r}")
        self.mode = plot_mode() if mode == "auto" else mode
        self.figure = go.Figure() if fig is None else fig
        if self.mode == "widget":
            self.widget = go.FigureWidget(self.figure)
        else:
            self.widget = widgets.Output()
            self._draw()

    def _draw(self) -> None:
        if IPython.get_ipython() is None:  # plain Python (scripts, doctests): nothing to draw into
            return
        # the Output's content replaced in one assignment, not with ``with output: display(...)``:
        # no flicker, and safe from a background thread (a live training run's dashboard). The
        # bundle is the default renderer's (Colab: HTML; Jupyter: plotly's mimetype + HTML).
        data = dict(self.figure._repr_mimebundle_() or {})
        if not data:  # an external default renderer (a browser tab): embed the figure as HTML instead
            data["text/html"] = self.figure.to_html(include_plotlyjs="cdn", full_html=False)
        data.setdefault("text/plain", f"<plotly figure: {self.figure.layout.title.text or 'untitled'}>")
        self.widget.outputs = ({"output_type": "display_data", "data": data, "metadata": {}},)

    def update(self, fig: go.Figure) -> None:
        """Show ``fig`` instead of the current figure."""
        self.figure = fig
        if self.mode == "static":
            self._draw()
            return
        with self.widget.batch_update():
            self.widget.data = ()
            self.widget.add_traces(list(fig.data))
            self.widget.layout = fig.layout


def interactive(
    build: Callable[..., go.Figure],
    controls: Mapping[str, widgets.ValueWidget],
    mode: str = "auto",
    *,
    beside: Callable[..., Sequence[Mapping] | str] | None = None,
    digits: int = 3,
) -> widgets.VBox:
    r"""Controls above a figure that ``build(**values)`` re-makes whenever a control changes, and under it what
    ``beside(**values)`` makes, if given: a table's rows (:func:`qae_lab.analysis.tables.markdown_table`, ``digits``
    per float) or Markdown. Both are made from the same values in the same refresh, so that a figure and the table
    beside it never show two settings.

    Works without a browser: setting ``control.value`` in code re-builds the figure (and its table) too. The
    returned box carries ``.view`` (its :class:`FigureView`), ``.controls``, ``.refresh``, ``.values`` (what the
    figure and the table shown were made from), ``.text`` (the Markdown under the figure, or "") and ``.make``
    (values -> the figure and the Markdown they give, as the box shows them).

    >>> from qae_lab.lab.plots import line_figure
    >>> s = widgets.IntSlider(value=2, min=1, max=5, description="n")
    >>> box = interactive(lambda n: line_figure(range(n), {"y": range(n)}), {"n": s}, mode="static",
    ...                   beside=lambda n: [{"n": n, "points": n}])
    >>> s.value = 4; len(box.view.figure.data[0].x), box.values, box.text.splitlines()[-1]
    (4, {'n': 4}, '| 4 | 4 |')
    """
    table = widgets.Output()

    def made(values: dict) -> tuple[go.Figure, str]:
        text = beside(**values) if beside is not None else ""
        if not isinstance(text, str):  # a table's rows; none (nothing logged at these values): no table
            text = markdown_table(text, digits=digits) if text else ""
        return build(**values), text

    def show(text: str) -> None:
        box.text = text
        bundle = {"text/markdown": text, "text/plain": text}
        table.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},) if text else ()

    def refresh(_change=None) -> None:
        values = {name: c.value for name, c in controls.items()}
        fig, text = made(values)
        view.update(fig)
        box.values = values
        show(text)

    values = {name: c.value for name, c in controls.items()}
    fig, text = made(values)
    view = FigureView(fig, mode=mode)
    box = widgets.VBox([widgets.HBox(list(controls.values()), layout={"flex_flow": "row wrap"}), view.widget, table])
    box.view, box.controls, box.refresh, box.make, box.values = view, dict(controls), refresh, made, values
    show(text)
    for c in controls.values():
        c.observe(refresh, names="value")
    return box


TITLE_CHARS = 80  # a title line longer than this wraps: plotly.js cuts titles at the figure's edge
TITLE_SIZE = 15


def wrap_title(title: str, width: int = TITLE_CHARS) -> str:
    r"""``title`` broken into lines of at most ``width`` characters at spaces, joined with ``<br>``
    (plotly.js neither wraps nor shrinks a title: a long one is cut at the figure's edge).

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


def _title(title: str) -> tuple[dict, int]:
    """The layout's title (wrapped) and the top margin in px that its lines need."""
    text = wrap_title(title) if title else ""
    return {"text": text, "font": {"size": TITLE_SIZE}}, 30 + 22 * (text.count("<br>") + 1) if text else 30


def _legend_below(px: int, plot_h: int) -> dict:
    """A horizontal legend whose top sits ``px`` pixels under a plot area ``plot_h`` pixels high."""
    return {"orientation": "h", "yanchor": "top", "y": -px / plot_h}


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, height: int) -> go.Figure:
    layout_title, top = _title(title)
    below = 92 if x_title else 40  # px under the plot area: tick labels (and the axis title), then the legend
    # the bottom margin holds a row of legend too: were plotly to widen the margin for it, the plot area would
    # shrink and the legend (placed in units of its height) would climb onto the axis title
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


def _styles(ys: Sequence[Sequence[float]]) -> list[dict]:
    """Line styles that keep every series visible: a series equal to an earlier one is drawn dashed on
    top of it, and the earlier one widened and paler underneath (otherwise one hides the other)."""
    ys = [list(y) for y in ys]
    styles = [{} for _ in ys]
    for j, y in enumerate(ys):
        first = next((i for i in range(j) if ys[i] == y), None)
        if first is not None:
            styles[j] = {"dash": "dash", "width": 2}
            styles[first] = {"width": 6, "opacity": 0.45}
    return styles


def vline(fig: go.Figure, x: float, text: str, dash: str = "dot", side: str = "right") -> go.Figure:
    r"""A vertical line at data value ``x`` with ``text`` at its top, on the ``side`` of the line,
    on a linear or a log x axis.

    plotly takes a shape's x in data units but an annotation's x on a log axis in log10 units, so
    ``fig.add_vline(x=2, annotation_text=...)`` on a log axis writes the label at 100 (or off the
    chart). Here the label is placed at log10(x) on a log axis.

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
    """A shaded y +- half band behind a line: the upper edge forwards, the lower edge backwards, no legend entry
    (in the line's ``legendgroup``, so that hiding the line hides its band; ``row``/``col``: a subplot's cell)."""
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
    r"""Lines sharing one x axis: ``series`` maps a legend name to its y values.

    ``bands`` optionally maps a series name to a +- half-width per point (shaded band).

    >>> fig = line_figure([1, 2, 3], {"a": [1, 4, 9]}, title="squares")
    >>> fig.data[0].name, list(fig.data[0].y)
    ('a', [1.0, 4.0, 9.0])

    A series equal to an earlier one is drawn dashed on top of it (:func:`_styles`), so neither hides.

    >>> [t.line.dash for t in line_figure([0, 1], {"a": [1, 2], "b": [1, 2]}).data]
    [None, 'dash']
    """
    fig = go.Figure()
    x = list(x)
    ys = [[float(v) for v in y] for y in series.values()]
    for i, (name, y, style) in enumerate(zip(series, ys, _styles(ys))):
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
    return _layout(fig, title, x_title, y_title, height)


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

    ``curves`` maps a legend name to an object with ``steps``, ``mean``, ``std`` and ``n_runs``
    (:func:`qae_lab.analysis.compare.metric_curves`); each curve keeps its own steps, drawn every
    ``stride``-th. A curve of one run has no band. The legend says how many runs each line averages.

    >>> from types import SimpleNamespace as C
    >>> fig = band_figure({"qae": C(steps=[1, 2], mean=[0.5, 0.6], std=[0.1, 0.1], n_runs=3)})
    >>> [t.name for t in fig.data], list(fig.data[0].y)  # the band (hidden from the legend), then the line
    ([None, 'qae (3 runs)'], [0.6, 0.7, 0.5, 0.4])

    A mean curve equal to an earlier one is drawn dashed over it, as in :func:`line_figure`.
    """
    fig = go.Figure()
    points = [list(zip(list(c.steps)[::stride], [float(v) for v in c.mean][::stride])) for c in curves.values()]
    for i, ((name, c), pts, style) in enumerate(zip(curves.items(), points, _styles(points))):
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
    return _layout(fig, title, x_title, y_title, height)


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
    r"""The colour to write on ``background``: :data:`TEXT_DARK` or :data:`TEXT_LIGHT`, whichever has the higher WCAG
    contrast ratio (L_light + 0.05) / (L_dark + 0.05) against it.

    >>> text_colour("#fde725"), text_colour("#440154"), text_colour("#808080"), text_colour("#767676")
    ('#1a1a1a', '#ffffff', '#1a1a1a', '#ffffff')
    """
    bg = relative_luminance(background)

    def ratio(text: str) -> float:
        lo, hi = sorted((bg, relative_luminance(text)))
        return (hi + 0.05) / (lo + 0.05)

    return TEXT_DARK if ratio(TEXT_DARK) >= ratio(TEXT_LIGHT) else TEXT_LIGHT


def scale_colour(colorscale: Sequence[Sequence], z: float, zmin: float, zmax: float) -> str:
    r"""The colour a heatmap paints ``z`` with: ``colorscale`` (``(position, colour)`` stops, as plotly validates
    them) interpolated linearly at (z - zmin) / (zmax - zmin), clipped to [0, 1].

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
    """The heatmap's (``fig.data[0]``) non-empty cell ``labels`` drawn over it as one text trace, each in the colour
    that reads on its cell (:func:`text_colour`; a blank cell shows the white plot behind it)."""
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
    r"""A heatmap of z[row][col] with rows labelled by ``y`` and columns by ``x``, its colour bar titled
    ``colorbar_title`` over [zmin, zmax] (default: the cells' range, even about ``zmid``).

    ``text`` (same shape as ``z``) is written in the cells at ``text_size`` px, each label fitted to its cell
    (:func:`fit_label`, :func:`cell_chars`) in the colour that reads on it (:func:`text_colour`), as a text trace
    over the heatmap; the heatmap's own ``text`` holds the same labels (its hover shows them). ``shown_cols``: the x
    axis opens on the first ``shown_cols`` columns (their labels fitted to that width), a range slider under it for
    the rest (the labels on a hidden twin of the x axis, which the slider leaves out). The left margin holds the
    longest row label, set off from the cells.

    Labels must be unique: plotly merges rows (or columns) that share a label into one, which would
    hide data without a word.

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
    _layout(fig, title, x_title, y_title, height)
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
    return _layout(fig, title, x_title, y_title, height)


# a verdict's colour (qae_lab.analysis.claims.VERDICTS): held green, reversed red, no difference grey
VERDICT_COLOURS = {
    "holds": "#2ca02c",
    "reversed": "#d62728",
    "no difference": "#7f7f7f",
    "cannot be tested here": "#bbbbbb",
}


def differences_figure(
    rows: Sequence[tuple[str, Sequence[float], str, float | None, float | None]],
    *,
    title: str = "",
    x_title: str = "a - b, per seed",
    height: int | None = None,
) -> go.Figure:
    r"""Paired seeds' differences, one row each: ``(label, differences, verdict, lo, hi)``, each seed's a - b a dot,
    their 95% interval [lo, hi] a bar (:func:`qae_lab.analysis.claims.verdict`) coloured by the verdict, and a line at
    zero: the seeds agree when every dot lies on one side of it.

    >>> fig = differences_figure([("hard, Adam", [-0.2, -0.1], "holds", -0.3, -0.01)])
    >>> [t.name for t in fig.data], list(fig.data[0].x)
    (['each seed', 'holds: 95% interval'], [-0.2, -0.1])
    """
    fig = go.Figure()
    shown: set[str] = set()
    for i, (label, diffs, word, lo, hi) in enumerate(rows):
        n = len(diffs)
        jitter = [i + 0.25 * ((j % 5) - 2) / 2 for j in range(n)]  # seeds spread a little around their row
        fig.add_trace(
            go.Scatter(
                x=[float(d) for d in diffs],
                y=jitter,
                mode="markers",
                marker={"color": "#1f77b4", "size": 7, "opacity": 0.7},
                name="each seed",
                legendgroup="seeds",
                showlegend=i == 0,
            )
        )
        if lo is not None:
            fig.add_trace(
                go.Scatter(
                    x=[lo, hi],
                    y=[i + 0.4, i + 0.4],
                    mode="lines+markers",
                    line={"color": VERDICT_COLOURS.get(word, "#444"), "width": 5},
                    marker={"symbol": "line-ns", "size": 12, "line": {"width": 2}},
                    name=f"{word}: 95% interval",
                    legendgroup=word,
                    showlegend=word not in shown,
                )
            )
            shown.add(word)
    fig.add_vline(x=0, line_color="#444", line_width=1)
    fig.update_yaxes(
        tickvals=list(range(len(rows))),
        ticktext=[r[0] for r in rows],
        range=[-0.7, len(rows) - 0.3],
        autorange="reversed",
    )
    return _layout(fig, title, x_title, "", height or 140 + 70 * len(rows))


# the sign of an advantage -> legend name and colour: rewarded green, punished red, untouched grey
ADVANTAGE_SIGNS = ((1, "A > 0", "#2ca02c"), (0, "A = 0", "#7f7f7f"), (-1, "A < 0", "#d62728"))


def change_figure(
    labels: Sequence[str],
    before: Sequence[float],
    after: Sequence[float],
    advantages: Sequence[float],
    *,
    title: str = "",
    x_title: str = "",
    y_title: str = "",
    height: int = 380,
) -> go.Figure:
    r"""One bar per item: its change ``after - before``, coloured by the sign of its advantage.

    A trace per sign present (``A > 0`` green, ``A = 0`` grey, ``A < 0`` red), the items in the order given;
    hovering a bar shows the values before and after. Labels must be unique (plotly merges equal categories).

    >>> fig = change_figure(["y0", "y1", "y2"], [-1, -2, -3], [-0.5, -2.5, -3], [1, -1, 0])
    >>> [(t.name, list(t.x), list(t.y)) for t in fig.data]
    [('A > 0', ['y0'], [0.5]), ('A = 0', ['y2'], [0.0]), ('A < 0', ['y1'], [-0.5])]
    """
    labels = [str(x) for x in labels]
    cols = [[float(v) for v in col] for col in (before, after, advantages)]
    if len(set(labels)) != len(labels) or any(len(col) != len(labels) for col in cols):
        raise ValueError(
            f"labels must be unique and before, after, advantages hold one value per label: "
            f"{len(set(labels))} unique of {len(labels)} labels, lengths {[len(c) for c in cols]}"
        )
    b, a, adv = cols
    fig = go.Figure()
    for sign, name, color in ADVANTAGE_SIGNS:
        rows = [i for i, v in enumerate(adv) if (v > 0) - (v < 0) == sign]
        if rows:
            fig.add_trace(
                go.Bar(
                    x=[labels[i] for i in rows],
                    y=[a[i] - b[i] for i in rows],
                    name=name,
                    marker_color=color,
                    customdata=[[b[i], a[i], adv[i]] for i in rows],
                    hovertemplate="%{x}: %{customdata[0]:.3f} -> %{customdata[1]:.3f}"
                    "<br>A = %{customdata[2]:+.3f}<extra></extra>",
                )
            )
    fig.update_xaxes(categoryorder="array", categoryarray=labels)
    return _layout(fig, title, x_title, y_title, height)


GATE_SYMBOLS = {-1: "−", 0: "0", 1: "+", 2: "±"}


def gate_heatmap(table, ks: Sequence[float], *, title: str = "", height: int = 420) -> go.Figure:
    r"""The two-regime gate as a heatmap: rows K, columns the success count c = 0..G.

    ``table`` is :func:`qae_lab.toys.sparsity.gate_table`'s output: +1 only successes move (green),
    -1 only failures (red), 0 nobody (grey), 2 both (purple, the linear convention only).

    >>> import torch
    >>> gate_heatmap(torch.tensor([[0, 1, -1, 0]]), [0.4]).data[0].text[0]
    ['0', '+', '−', '0']
    """
    rows = [[int(v) for v in row] for row in table]
    colorscale = [
        [0.0, "#d62728"],
        [0.25, "#d62728"],
        [0.25, "#e5e5e5"],
        [0.5, "#e5e5e5"],
        [0.5, "#2ca02c"],
        [0.75, "#2ca02c"],
        [0.75, "#9467bd"],
        [1.0, "#9467bd"],
    ]
    fig = heatmap_figure(
        rows,
        x=list(range(len(rows[0]))),
        y=[f"K={k:g}" for k in ks],
        title=title,
        x_title="correct responses c in the group",
        y_title="K",
        text=[[GATE_SYMBOLS[v] for v in row] for row in rows],
        colorscale=colorscale,
        zmid=None,
        zmin=-1.5,
        zmax=2.5,
        height=height,
    )
    fig.update_traces(showscale=False, selector={"type": "heatmap"})
    return fig


LEGEND_PX = 24  # a panel's legend: one row of names between its title and its plot area


def curve_style(metric: str) -> tuple[str, str, str]:
    r"""``(name, unit, colour)`` of a logged metric (:data:`CURVES`); a metric not there: its key, no unit, and a
    colour of :data:`PALETTE` chosen by its name (the same in every figure and every process).

    >>> curve_style("qae/easy_frac")
    ('easy share', 'share of prompts', '#2ca02c')
    >>> curve_style("my/metric") == curve_style("my/metric")
    True
    """
    if metric in CURVES:
        return CURVES[metric]
    return metric, "", PALETTE[zlib.crc32(metric.encode()) % len(PALETTE)]


def _panel_traces(rows: Sequence[Mapping], keys: Sequence[str], legend: str) -> list[go.Scatter]:
    """One line per metric of ``keys`` with a logged value, in its own colour and under its plain name in ``legend``;
    none logged: a line of one missing point per metric (plotly.js names it in the legend, an empty one it leaves out),
    so that the legend says what the panel will draw."""
    curves = [(key, [(row["step"], float(row[key])) for row in rows if row.get(key) is not None]) for key in keys]
    drawn = [(key, pts) for key, pts in curves if pts]
    styles = _styles([pts for _, pts in drawn]) if drawn else [{} for _ in keys]
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
    """Panel ``i`` of a :func:`run_curves_figure`: its lines, its legend between its title and its plot, its axes'
    titles (units) and, where nothing is logged, ``note`` centred on it."""
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

    Each panel has its own legend, above its plot, naming its lines in plain words (:data:`CURVES`); a metric has
    one colour in every panel and at every redraw. The y axes carry their metrics' units (shares span 0 to 1), the
    x axes the training step. A panel with nothing logged shows its note from ``notes`` (why it is empty: "waiting
    for the first step", "SA-AH off"), else "not logged in this run"; a row where a metric is None is skipped.

    >>> fig = run_curves_figure([{"step": 1, "reward": 0.2}, {"step": 2, "reward": 0.4}], {"reward": ("reward",)})
    >>> list(fig.data[0].x), list(fig.data[0].y), fig.data[0].name, fig.data[0].line.color
    ([1, 2], [0.2, 0.4], 'mean reward', '#1f77b4')
    """
    names, notes = list(panels), dict(notes or {})
    n_rows = (len(names) + 1) // 2
    layout_title, _ = _title(title)
    lines = layout_title["text"].count("<br>") + 1 if title else 0
    # px: the title's lines, then the first panels' titles and legends; "training step" below
    top, bottom, gap = 12 + 22 * lines + 28 + LEGEND_PX, 50, 105
    height = height_per_row * n_rows + top + bottom
    plot_h = height - top - bottom
    # the title's first line 10 px from the top, the others under it (plotly.js anchors a title of several lines by
    # its first line: yanchor "bottom" puts that line's top 14 px above y, whatever the number of lines)
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
