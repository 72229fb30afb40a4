r"""Figures of training runs over seeds (the lab layer): notebooks 05 and 06 put them under their controls with
:func:`qae_lab.plots.interactive`, keyword arguments named as the controls.

:func:`curves_figure` draws a logged metric of several runs, averaged over seeds, after a trailing average;
:func:`pass_at_k_figure` pass@k against k before and after training and :func:`k_sweep_figure` a K sweep
(notebook 06); :func:`before_after_figure` an evaluation figure before and after training and
:func:`detrend_figure` one run's reward around its trailing average (notebook 05). The numbers come from
:mod:`qae_lab.compare`, :mod:`qae_lab.phenomena_curves` and :mod:`qae_lab.runstats`; the figures from
:mod:`qae_lab.plots`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

import plotly.graph_objects as go

from qae_lab.compare import metric_curves, series
from qae_lab.phenomena_curves import BEFORE, k_sweep_lines, pass_at_k_lines
from qae_lab.plots import band_figure, bar_figure, line_figure
from qae_lab.runstats import detrended_variance, moving_average

__all__ = ["curves_figure", "pass_at_k_figure", "k_sweep_figure", "before_after_figure", "detrend_figure"]


def curves_figure(runs: Iterable, metric: str, window: int, *, labels: Mapping[str, str], title: str,
                  y_title: str = "{label}", stride: int = 1) -> go.Figure:
    r"""``metric`` of every group of ``runs`` per step, mean over seeds +- std, after a trailing ``window``-step
    average (:func:`qae_lab.compare.metric_curves`, drawn by :func:`qae_lab.plots.band_figure`).

    Args:
        runs: :class:`~qae_lab.compare.Run` s, or the groups of :func:`qae_lab.grouping.group_runs`.
        metric: a key of ``labels``; ``labels[metric]`` is its name in words.
        window: steps in the trailing average, >= 1.
        title, y_title: templates filled with ``{metric}``, ``{label}`` and ``{window}``.
        stride: draw every ``stride``-th step.

    >>> from qae_lab.compare import Run
    >>> runs = [Run(f"qae-seed{s}", "qae", s, {}, [{"step": t, "reward": 0.1 * s} for t in (1, 2)], None, None)
    ...         for s in (0, 1)]
    >>> fig = curves_figure(runs, "reward", 1, labels={"reward": "mean reward"}, title="{label}, {window} step")
    >>> fig.layout.title.text, fig.layout.yaxis.title.text, [round(y, 3) for y in fig.data[1].y]
    ('mean reward, 1 step', 'mean reward', [0.05, 0.05])
    """
    if metric not in labels:
        raise ValueError(f"metric must be one of {list(labels)}, got {metric!r}")
    words = {"metric": metric, "label": labels[metric], "window": window}
    return band_figure(metric_curves(runs, metric, window), y_title=y_title.format(**words), stride=stride,
                       title=title.format(**words))


def pass_at_k_figure(table: Mapping, *, title: str = "pass@k before and after training, mean over seeds ± std"
                     ) -> go.Figure:
    r"""pass@k against k (log axis, a tick per k) for each method after training, with a +- std band, and the
    dashed line before training (:func:`qae_lab.phenomena_curves.pass_at_k_lines`).

    Args:
        table: :func:`qae_lab.phenomena.pass_at_k_table`.

    >>> from qae_lab.runstats import stat
    >>> table = {"qae": {"before": {1: stat([0.4]), 4: stat([0.7])}, "after": {1: stat([0.5]), 4: stat([0.8])}}}
    >>> fig = pass_at_k_figure(table)
    >>> [t.name for t in fig.data if t.name], fig.data[-1].line.dash, list(fig.layout.xaxis.tickvals)
    (['qae, after', 'before (every method)'], 'dash', [1, 4])
    """
    lines = pass_at_k_lines(table)
    fig = line_figure(lines.x, lines.y, bands=lines.bands, markers=True, x_title="k (samples)", y_title="pass@k",
                      title=title)
    fig.update_xaxes(type="log", tickvals=lines.x)  # one tick per k drawn
    fig.update_traces(line_dash="dash", selector={"name": BEFORE})
    return fig


def k_sweep_figure(rows: Sequence[Mapping], quantity: str) -> go.Figure:
    r"""One quantity of a K sweep against K, mean over seeds +- std (:func:`qae_lab.phenomena_curves.k_sweep_lines`).

    >>> from qae_lab.runstats import stat
    >>> fig = k_sweep_figure([{"k": 0.2, "pass@1": stat([0.4, 0.6])}, {"k": 0.8, "pass@1": stat([0.5])}], "pass@1")
    >>> list(fig.data[-1].x), list(fig.data[-1].y), fig.layout.title.text
    ([0.2, 0.8], [0.5, 0.5], 'pass@1 after training against K')
    """
    lines = k_sweep_lines(rows, quantity)
    return line_figure(lines.x, lines.y, bands=lines.bands, markers=True, x_title="K", y_title=quantity,
                       title=f"{quantity} after training against K")


def before_after_figure(table: Sequence[Mapping], metric: str) -> go.Figure:
    r"""``metric`` before and after training for each row of :func:`qae_lab.compare.summary_table` evaluated both
    times: grouped bars of the means over seeds with +- std error bars.

    >>> from qae_lab.runstats import stat
    >>> table = [{"method": "qae", "pass@1 before": stat([0.3]), "pass@1 after": stat([0.5, 0.7])},
    ...          {"method": "mine", "pass@1 before": None, "pass@1 after": stat([0.6])}]
    >>> fig = before_after_figure(table, "pass@1")
    >>> [(t.name, list(t.x), list(t.y), list(t.error_y.array)) for t in fig.data]
    [('before', ['qae'], [0.3], [0.0]), ('after', ['qae'], [0.6], [0.09999999999999998])]
    """
    shown = [row for row in table if row[f"{metric} before"] and row[f"{metric} after"]]
    stats = {when: [row[f"{metric} {when}"] for row in shown] for when in ("before", "after")}
    fig = bar_figure([row["method"] for row in shown], {when: [s.mean for s in ss] for when, ss in stats.items()},
                     title=f"{metric} before and after training (mean over seeds ± std)", y_title=metric)
    for trace, ss in zip(fig.data, stats.values()):
        trace.error_y = {"type": "data", "array": [s.std for s in ss]}
    return fig


def detrend_figure(runs: Iterable, run: str, window: int, *, stride: int = 1) -> go.Figure:
    r"""One run's reward per step with its trailing ``window``-step average, every ``stride``-th step drawn; the
    title gives the detrended variance (:func:`qae_lab.runstats.detrended_variance`) and the plain one when the run
    is longer than the window.

    >>> from qae_lab.compare import Run
    >>> rows = [{"step": t, "reward": x} for t, x in enumerate([0.0, 0.5, 0.0, 0.5], 1)]
    >>> fig = detrend_figure([Run("qae-seed0", "qae", 0, {}, rows, None, None)], "qae-seed0", 2)
    >>> fig.layout.title.text, list(fig.data[1].y)
    ('qae-seed0: detrended variance 0.0556 (window 2), plain variance 0.0625', [0.0, 0.25, 0.25, 0.25])
    """
    chosen = next((r for r in runs if r.name == run), None)
    if chosen is None:
        raise ValueError(f"no run named {run!r}")
    steps, x = series(chosen, "reward")
    m = moving_average(x, window)
    fig = line_figure(steps[::stride],
                      {"reward per step": x[::stride], f"trailing average, {window} steps": m[::stride]},
                      x_title="step", y_title="mean reward of the step's completions", title=run)
    if len(x) > window:
        fig.update_layout(title=f"{run}: detrended variance {detrended_variance(x, window):.4f} (window {window}), "
                                f"plain variance {statistics.pvariance(x):.4f}")
    return fig
