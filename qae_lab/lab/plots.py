r"""Plotly figures for the notebooks, and the views that re-draw them in place when a control moves.

Plotly figures for the notebooks, and (re-exported from :mod:`qae_lab.lab.plots`) views that re-draw
them when a slider moves.

Every function returns a plain ``plotly.graph_objects.Figure``; the notebooks only call them.
Titles wrap instead of being cut at the figure's edge, legends sit below the axis titles, and a
curve equal to another is drawn dashed over it, so that what a title or legend names can be seen.

The former ``views`` module: figures that re-draw in place when a control moves: :class:`FigureView` and :func:`interactive`.

By default (:func:`plot_mode`) a view re-draws a plain figure into an ``ipywidgets.Output``:
that figure fills the notebook's column in JupyterLab, Jupyter and Colab alike. A
``go.FigureWidget`` (``QAE_LAB_PLOTS=widget``) updates in place but keeps plotly.js's
700 px default width (plotly's anywidget front end lays it out before it is on the page),
and shows nothing in Colab (ipywidgets 7.7, plotly 5.24). The figures themselves come
from :mod:`qae_lab.lab.plots`, which re-exports these names.
"""

from __future__ import annotations

import math
import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import IPython
import ipywidgets as widgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from qae_lab.methods import QAE_EASY_FRAC, QAE_HARD_FRAC, QAE_K, QAE_ZERO_ADV_FRAC, SAAH_ALPHA, SAAH_W_MEAN_NEG

__all__ = [
    "wrap_title",
    "vline",
    "line_figure",
    "band_figure",
    "heatmap_figure",
    "bar_figure",
    "change_figure",
    "VERDICT_COLOURS",
    "differences_figure",
    "gate_heatmap",
    "run_curves_figure",
    "RUN_CURVES",
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
    build: Callable[..., go.Figure], controls: Mapping[str, widgets.ValueWidget], mode: str = "auto"
) -> widgets.VBox:
    r"""Controls above a figure that ``build(**values)`` re-makes whenever a control changes.

    Works without a browser: setting ``control.value`` in code re-builds the figure too.
    The returned box carries ``.view`` (its :class:`FigureView`) and ``.controls``.

    >>> from qae_lab.lab.plots import line_figure
    >>> s = widgets.IntSlider(value=2, min=1, max=5, description="n")
    >>> box = interactive(lambda n: line_figure(range(n), {"y": range(n)}), {"n": s}, mode="static")
    >>> s.value = 4; len(box.view.figure.data[0].x)
    4
    """
    view = FigureView(build(**{name: c.value for name, c in controls.items()}), mode=mode)

    def refresh(_change=None) -> None:
        view.update(build(**{name: c.value for name, c in controls.items()}))

    for c in controls.values():
        c.observe(refresh, names="value")
    box = widgets.VBox([widgets.HBox(list(controls.values()), layout={"flex_flow": "row wrap"}), view.widget])
    box.view, box.controls, box.refresh = view, dict(controls), refresh
    return box


PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#7f7f7f")


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
    height: int = 420,
    text_size: int = 11,
) -> go.Figure:
    r"""A heatmap of z[row][col] with rows labelled by ``y`` and columns by ``x``; ``text`` (same shape
    as ``z``) is written in the cells at ``text_size`` px (plotly would shrink it to fit, often to dots).

    Labels must be unique: plotly merges rows (or columns) that share a label into one, which would
    hide data without a word.

    >>> heatmap_figure([[1, -1]], x=[0, 1], y=["K=0.4"]).data[0].type
    'heatmap'
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
    fig = go.Figure(
        go.Heatmap(
            z=[list(map(float, row)) for row in z],
            x=x,
            y=y,
            text=[list(r) for r in text] if text is not None else None,
            texttemplate="%{text}" if text is not None else None,
            textfont={"size": text_size},
            colorscale=colorscale,
            zmid=zmid,
            zmin=zmin,
            zmax=zmax,
        )
    )
    return _layout(fig, title, x_title, y_title, height)


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
    fig.update_traces(showscale=False)
    return fig


# panel title -> the logged metrics it draws (TRL's names and qae_lab's qae/*, saah/*)
RUN_CURVES = {
    "reward": ("reward",),
    "entropy": ("entropy", "entropy/updated_rows"),
    "zero-advantage fraction": (QAE_ZERO_ADV_FRAC,),
    "hard / easy prompt fractions": (QAE_HARD_FRAC, QAE_EASY_FRAC),
    "K": (QAE_K,),
    "alpha": (SAAH_ALPHA,),
    "SA-AH mean weight, negative rollouts": (SAAH_W_MEAN_NEG,),
    "completion length (tokens)": ("completions/mean_length",),
}


def run_curves_figure(
    rows: Sequence[Mapping],
    panels: Mapping[str, Sequence[str]] = RUN_CURVES,
    *,
    title: str = "",
    height_per_row: int = 280,
) -> go.Figure:
    r"""Training curves from log rows (dicts with ``step`` and metrics), one panel per entry of ``panels``.

    A metric missing from every row (e.g. ``saah/*`` without token weighting) leaves its
    panel with a "not logged" note; a row where it is None is skipped.

    >>> fig = run_curves_figure([{"step": 1, "reward": 0.2}, {"step": 2, "reward": 0.4}], {"reward": ("reward",)})
    >>> list(fig.data[0].x), list(fig.data[0].y)
    ([1, 2], [0.2, 0.4])
    """
    names = list(panels)
    n_rows = (len(names) + 1) // 2
    layout_title, top = _title(title)
    top, bottom, gap = top + 10, 110, 70  # px: title, "step" + legend below, between rows
    height = height_per_row * n_rows + top + bottom
    plot_h = height - top - bottom
    fig = make_subplots(
        rows=n_rows,
        cols=2,
        subplot_titles=names,
        horizontal_spacing=0.1,
        vertical_spacing=min(gap / plot_h, 0.9 / max(n_rows - 1, 1)) if n_rows > 1 else 0,
    )
    color = 0
    for i, (name, keys) in enumerate(panels.items()):
        r, c = i // 2 + 1, i % 2 + 1
        curves = [(key, [(row["step"], float(row[key])) for row in rows if row.get(key) is not None]) for key in keys]
        curves = [(key, pts) for key, pts in curves if pts]
        for (key, pts), style in zip(curves, _styles([pts for _, pts in curves])):
            fig.add_trace(
                go.Scatter(
                    x=[p[0] for p in pts],
                    y=[p[1] for p in pts],
                    name=key,
                    mode="lines",
                    opacity=style.pop("opacity", None),
                    line={"color": PALETTE[color % len(PALETTE)], **style},
                ),
                row=r,
                col=c,
            )
            color += 1
        if not curves:  # centred on the panel in paper coordinates (its axes have no data to anchor to)
            panel = fig.get_subplot(r, c)
            fig.add_annotation(
                text="not logged in this run",
                showarrow=False,
                xref="paper",
                yref="paper",
                x=sum(panel.xaxis.domain) / 2,
                y=sum(panel.yaxis.domain) / 2,
            )
        if r == n_rows or (r == n_rows - 1 and i + 2 >= len(names)):  # the lowest panel of each column
            fig.update_xaxes(title_text="step", title_standoff=4, row=r, col=c)
    fig.update_layout(
        title=layout_title,
        height=height,
        template="plotly_white",
        margin={"l": 50, "r": 20, "t": top, "b": bottom},
        legend=_legend_below(52, plot_h),
    )
    return fig
