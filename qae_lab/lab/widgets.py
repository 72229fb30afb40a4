r"""Views that re-draw a figure in place when a control moves: :class:`FigureView` and :func:`interactive`.

A plain figure re-drawn into an ``ipywidgets.Output`` by default, a ``go.FigureWidget`` where ``QAE_LAB_PLOTS=widget``
asks for one (docs/implementation.md, section ``qae_lab.lab.widgets``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence

import IPython
import ipywidgets as widgets
import plotly.graph_objects as go

from qae_lab.analysis.tables import markdown_table


def _env_mode() -> str:
    """``QAE_LAB_PLOTS`` (default ``auto``), checked."""
    mode = os.environ.get("QAE_LAB_PLOTS", "auto").strip().lower()
    if mode not in ("auto", "widget", "static"):
        raise ValueError(f"QAE_LAB_PLOTS must be one of 'auto', 'widget', 'static', got {mode!r}")
    return mode


def figure_widget_supported() -> bool:
    r"""Whether ``go.FigureWidget`` can render here: not in Colab (ipywidgets 7.7), not where building one fails
    (plotly 6 without anywidget); ``QAE_LAB_PLOTS`` forces the answer.

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
    r"""What ``mode="auto"`` picks: ``"widget"`` only where ``QAE_LAB_PLOTS=widget`` asks, else ``"static"``.

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

    ``widget`` is what to display; ``figure`` the plain ``go.Figure`` shown last (what tests inspect).

    >>> from qae_lab.lab.figures import line_figure
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
        # replaced in one assignment, not ``with output: display(...)``: no flicker, safe from a background thread
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
    r"""Controls above a figure that ``build(**values)`` re-makes at every change, and under it ``beside(**values)``
    (table rows or Markdown), made in the same refresh so that the two never show two settings.

    Setting ``control.value`` in code re-builds too. The box carries ``.view``, ``.controls``, ``.refresh``,
    ``.values``, ``.text`` (the Markdown shown) and ``.make`` (values -> figure and Markdown).

    >>> from qae_lab.lab.figures import line_figure
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
