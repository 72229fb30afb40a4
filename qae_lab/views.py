r"""Figures that re-draw in place when a control moves: :class:`FigureView` and :func:`interactive`.

By default (:func:`plot_mode`) a view re-draws a plain figure into an ``ipywidgets.Output``:
that figure fills the notebook's column in JupyterLab, Jupyter and Colab alike. A
``go.FigureWidget`` (``QAE_LAB_PLOTS=widget``) updates in place but keeps plotly.js's
700 px default width (plotly's anywidget front end lays it out before it is on the page),
and shows nothing in Colab (ipywidgets 7.7, plotly 5.24). The figures themselves come
from :mod:`qae_lab.plots`, which re-exports these names.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

import IPython
import ipywidgets as widgets
import plotly.graph_objects as go

__all__ = ["figure_widget_supported", "plot_mode", "FigureView", "interactive"]


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

    >>> from qae_lab.plots import line_figure
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


def interactive(build: Callable[..., go.Figure], controls: Mapping[str, widgets.ValueWidget],
                mode: str = "auto") -> widgets.VBox:
    r"""Controls above a figure that ``build(**values)`` re-makes whenever a control changes.

    Works without a browser: setting ``control.value`` in code re-builds the figure too.
    The returned box carries ``.view`` (its :class:`FigureView`) and ``.controls``.

    >>> from qae_lab.plots import line_figure
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
