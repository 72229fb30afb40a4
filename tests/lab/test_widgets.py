"""Tests for qae_lab.lab.widgets: the widget/static choice, FigureView's in-place re-drawing, interactive controls."""

from __future__ import annotations

import json
import sys
import types

import IPython
import IPython.display
import ipywidgets as widgets
import plotly.graph_objects as go
import pytest

from qae_lab.lab import widgets as views
from qae_lab.lab.figures import bar_figure, line_figure
from qae_lab.lab.widgets import FigureView, figure_widget_supported, interactive


@pytest.fixture
def no_plots_env(monkeypatch):
    """No QAE_LAB_PLOTS and no Colab, whatever the machine running the tests has."""
    monkeypatch.delenv("QAE_LAB_PLOTS", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)


@pytest.fixture
def colab(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))


# ---------------------------------------------------------------- widget or static


@pytest.mark.parametrize("value,want", [("widget", True), ("static", False), (" Widget ", True), ("STATIC", False)])
def test_figure_widget_supported_env(monkeypatch, colab, value, want):
    # the variable wins, even in Colab
    monkeypatch.setenv("QAE_LAB_PLOTS", value)
    assert figure_widget_supported() is want


@pytest.mark.parametrize("value", ["on", "1", "widgets", "plotly"])
def test_figure_widget_supported_invalid_env(monkeypatch, value):
    monkeypatch.setenv("QAE_LAB_PLOTS", value)
    with pytest.raises(ValueError, match="QAE_LAB_PLOTS"):
        figure_widget_supported()
    with pytest.raises(ValueError, match="QAE_LAB_PLOTS"):
        FigureView(mode="auto")


def test_figure_widget_supported_false_in_colab(no_plots_env, colab):
    assert figure_widget_supported() is False
    assert FigureView(mode="auto").mode == "static"


@pytest.mark.parametrize("env", [None, "auto", " AUTO "])
def test_figure_widget_supported_auto_outside_colab(no_plots_env, monkeypatch, env):
    if env is not None:
        monkeypatch.setenv("QAE_LAB_PLOTS", env)
    # auto: whether a FigureWidget can be built here
    try:
        go.FigureWidget()
        can_build = True
    except Exception:
        can_build = False
    assert figure_widget_supported() is can_build

    def broken(*args, **kwargs):
        raise ImportError("no anywidget")

    monkeypatch.setattr(views.go, "FigureWidget", broken)
    assert figure_widget_supported() is False


@pytest.mark.parametrize("env", [None, "auto", "static"])
def test_auto_mode_draws_plain_figures_unless_widget_is_asked_for(no_plots_env, monkeypatch, env):
    # a FigureWidget keeps plotly.js's 700 px default width in JupyterLab: the default is the plain figure,
    # which fills the column, wherever a FigureWidget could be built
    if env is not None:
        monkeypatch.setenv("QAE_LAB_PLOTS", env)
    assert views.plot_mode() == "static"
    view = FigureView(line_figure([0, 1], {"a": [0, 1]}))
    assert view.mode == "static" and isinstance(view.widget, widgets.Output)


def test_widget_mode_needs_a_buildable_figure_widget(monkeypatch):
    monkeypatch.setenv("QAE_LAB_PLOTS", "widget")
    assert views.plot_mode() == "widget"
    monkeypatch.setattr(views, "figure_widget_supported", lambda: False)
    assert views.plot_mode() == "static"


def test_auto_mode_follows_the_env(monkeypatch):
    monkeypatch.setenv("QAE_LAB_PLOTS", "static")
    view = FigureView(line_figure([0, 1], {"a": [0, 1]}))
    assert view.mode == "static" and isinstance(view.widget, widgets.Output)
    monkeypatch.setenv("QAE_LAB_PLOTS", "widget")
    view = FigureView(line_figure([0, 1], {"a": [0, 1]}))
    assert view.mode == "widget" and isinstance(view.widget, go.FigureWidget)


# ---------------------------------------------------------------- FigureView


def test_figure_view_static_update_replaces_the_figure():
    first, second = line_figure([0, 1], {"a": [0, 1]}), bar_figure(["x"], {"b": [2]})
    view = FigureView(first, mode="static")
    assert view.mode == "static" and isinstance(view.widget, widgets.Output)
    assert view.figure is first
    view.update(second)
    assert view.figure is second and view.figure.data[0].name == "b"
    assert isinstance(FigureView(mode="static").figure, go.Figure)  # no figure yet: an empty one


def test_figure_view_static_redraws_into_its_output(monkeypatch):
    # in a kernel, static mode replaces its Output's content with the new figure's display data,
    # also when the update comes from a background thread (a live run's dashboard)
    import threading

    import plotly.io as pio

    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(pio.renderers, "default", "plotly_mimetype")  # what a Jupyter kernel picks
    first, second = line_figure([0, 1], {"first-trace": [0, 1]}), line_figure([0, 1], {"second-trace": [1, 0]})
    view = FigureView(first, mode="static")

    def shown() -> str:
        (out,) = view.widget.outputs
        assert out["output_type"] == "display_data"
        return json.dumps(out["data"])

    assert "first-trace" in shown() and "second-trace" not in shown()
    worker = threading.Thread(target=view.update, args=(second,))
    worker.start()
    worker.join()
    assert "second-trace" in shown() and "first-trace" not in shown()
    monkeypatch.setattr(pio.renderers, "default", "browser")  # no mime bundle: embedded HTML instead
    view.update(first)
    assert "text/html" in view.widget.outputs[0]["data"] and "first-trace" in shown()


def test_figure_view_widget_update_replaces_the_traces():
    first = line_figure([0, 1, 2], {"a": [0, 1, 2], "b": [2, 1, 0]}, title="first")
    view = FigureView(first, mode="widget")
    assert view.mode == "widget" and isinstance(view.widget, go.FigureWidget)
    assert [t.name for t in view.widget.data] == ["a", "b"]
    second = line_figure([0, 1], {"c": [5, 6]}, title="second", log_y=True)
    view.update(second)
    assert view.figure is second
    assert [t.name for t in view.widget.data] == ["c"]
    assert list(view.widget.data[0].y) == [5.0, 6.0]
    assert view.widget.layout.title.text == "second" and view.widget.layout.yaxis.type == "log"
    view.update(bar_figure(["x", "y"], {"m": [1, 2], "q": [3, 4]}))
    assert [t.type for t in view.widget.data] == ["bar", "bar"]


@pytest.mark.parametrize("mode", ["Static", "widgets", "", None])
def test_figure_view_bad_mode(mode):
    with pytest.raises(ValueError, match="mode"):
        FigureView(mode=mode)
    with pytest.raises(ValueError, match="mode"):
        interactive(lambda n: line_figure(range(n), {"y": range(n)}), {"n": widgets.IntSlider(value=2)}, mode=mode)


# ---------------------------------------------------------------- interactive


@pytest.mark.parametrize("mode", ["static", "widget"])
def test_interactive_rebuilds_on_control_change(mode):
    calls = []

    def build(n, kind):
        calls.append((n, kind))
        return line_figure(range(n), {kind: [i * i for i in range(n)]})

    n = widgets.IntSlider(value=2, min=1, max=10)
    kind = widgets.Dropdown(options=["mean", "quantile"], value="mean")
    box = interactive(build, {"n": n, "kind": kind}, mode=mode)
    assert isinstance(box, widgets.VBox)
    assert box.view.mode == mode and box.controls == {"n": n, "kind": kind}
    assert box.children[1] is box.view.widget and list(box.children[0].children) == [n, kind]
    assert calls == [(2, "mean")]
    n.value = 5
    assert calls[-1] == (5, "mean") and len(box.view.figure.data[0].x) == 5
    kind.value = "quantile"
    assert calls[-1] == (5, "quantile") and box.view.figure.data[0].name == "quantile"
    if mode == "widget":
        assert [t.name for t in box.view.widget.data] == ["quantile"]
        assert list(box.view.widget.data[0].y) == [0.0, 1.0, 4.0, 9.0, 16.0]
    n.value = 5  # no change, no re-build
    assert len(calls) == 3
    box.refresh()
    assert len(calls) == 4


@pytest.mark.parametrize("mode", ["static", "widget"])
def test_interactive_redraws_the_figure_and_the_table_under_it_together(mode):
    # the figure and the table beside it come from the same values after every move: a table computed once
    # ("At alpha = 0.5 ... 0.58" under a figure at alpha = 0.65) cannot happen
    made = []

    def build(alpha):
        made.append(("figure", alpha))
        return line_figure([0, 1], {"w": [1.0, 1 - alpha]}, title=f"α = {alpha:g}")

    def rows(alpha):
        made.append(("table", alpha))
        return [{"α": alpha, "mean w": 1 - alpha / 2}]

    alpha = widgets.FloatSlider(value=0.5, min=0.0, max=3.0, step=0.05)
    box = interactive(build, {"alpha": alpha}, mode=mode, beside=rows, digits=2)
    table = box.children[2]
    assert isinstance(table, widgets.Output) and box.text.splitlines()[-1] == "| 0.50 | 0.75 |"
    assert table.outputs[0]["data"]["text/markdown"] == box.text
    alpha.value = 0.65
    assert made[-2:] == [("table", 0.65), ("figure", 0.65)] and box.values == {"alpha": 0.65}
    assert box.view.figure.layout.title.text == "α = 0.65" and box.text.splitlines()[-1] == "| 0.65 | 0.68 |"
    assert table.outputs[0]["data"]["text/markdown"] == box.text
    fig, text = box.make({"alpha": 0.65})  # what the box shows is what its functions make of the values shown
    assert fig.to_json() == box.view.figure.to_json() and text == box.text
    markdown = interactive(build, {"alpha": alpha}, mode="static", beside=lambda alpha: f"**α = {alpha:g}**")
    alpha.value = 1.0
    assert markdown.text == "**α = 1**"
    empty = interactive(build, {"alpha": alpha}, mode="static", beside=lambda alpha: [])  # nothing to tabulate
    assert empty.text == "" and empty.children[2].outputs == ()
    plain = interactive(build, {"alpha": alpha}, mode="static")
    assert plain.text == "" and plain.children[2].outputs == () and plain.make({"alpha": 1.0})[1] == ""
