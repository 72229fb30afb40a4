r"""Figures of training runs over seeds (notebooks 04-06), put under controls with :func:`qae_lab.lab.widgets.interactive`;
the numbers from :mod:`qae_lab.analysis.compare` and :mod:`qae_lab.analysis.stats`.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from qae_lab._checks import check_int
from qae_lab.analysis.compare import metric_curves, series
from qae_lab.task.evaluate import EvalResult
from qae_lab.lab.figures import add_band_line, band_figure, bar_figure, line_figure, wrap_title
from qae_lab.labels import GROUP_WORDS, PALETTE
from qae_lab.analysis.regime_runs import regime_eval_curves, regime_eval_numbers
from qae_lab.analysis.seqpolicy_runs import REGIMES, setting_name
from qae_lab.analysis.stats import Stat, detrended_variance, moving_average, stat

__all__ = [
    "BEFORE",
    "K_SWEEP_QUANTITIES",
    "Lines",
    "pass_at_k_lines",
    "k_sweep_lines",
    "curves_figure",
    "pass_at_k_figure",
    "k_sweep_figure",
    "before_after_figure",
    "detrend_figure",
    "paired_completions",
    "regime_figure",
    "prompt_group_name",
    "regimes_figure",
]


K_SWEEP_QUANTITIES: tuple[str, ...] = ("final entropy", "final easy fraction", "pass@1", "pass@32")

BEFORE = "before (every method)"  # the one pass@k line before training: every method starts from the same model


class Lines(NamedTuple):
    r"""Lines over one x axis, as :func:`qae_lab.lab.figures.line_figure` takes them: ``y`` means, ``bands`` stds.

    >>> Lines([1, 2], {"a": [0.5, 0.6]}, {}).y["a"]
    [0.5, 0.6]
    """

    x: list
    y: dict[str, list[float]]
    bands: dict[str, list[float]]


def pass_at_k_lines(table: Mapping[str, Mapping[str, Mapping[int, Stat]]]) -> Lines:
    r"""pass@k against k: a line per method after training (mean +- std), then one before training (:data:`BEFORE`).

    ``table``: :func:`qae_lab.analysis.phenomena.pass_at_k_table`. Every method starts from the same model, so the
    before line is the first method's; befores that differ raise.

    >>> from qae_lab.analysis.stats import stat
    >>> before = {1: stat([0.4, 0.4]), 2: stat([0.6, 0.6])}
    >>> table = {"mean": {"before": before, "after": {1: stat([0.5, 0.7]), 2: stat([0.8, 0.8])}},
    ...          "qae": {"before": before, "after": {1: stat([0.5, 0.5]), 2: stat([0.5, 1.0])}}}
    >>> lines = pass_at_k_lines(table)
    >>> lines.x, lines.y["mean, after"], lines.y["before (every method)"], lines.bands["qae, after"]
    ([1, 2], [0.6, 0.8], [0.4, 0.6], [0.0, 0.25])
    """
    if not table:
        raise ValueError("no methods in the pass@k table (qae_lab.analysis.phenomena.pass_at_k_table of no runs?)")
    first = next(iter(table.values()))
    ks = sorted(first["after"])
    for method, t in table.items():
        if any(k in t["before"] and abs(t["before"][k].mean - first["before"][k].mean) > 1e-12 for k in ks):
            raise ValueError(
                f"{method}'s pass@k before training differs from {next(iter(table))}'s: the runs do "
                "not start from one model, so there is no single before line"
            )
    y = {f"{m}, after": [t["after"][k].mean for k in ks] for m, t in table.items()}
    y[BEFORE] = [first["before"][k].mean for k in ks]
    bands = {f"{m}, after": [t["after"][k].std for k in ks] for m, t in table.items()}
    return Lines(ks, y, bands)


def k_sweep_lines(rows: Sequence[Mapping], quantity: str) -> Lines:
    r"""One of :data:`K_SWEEP_QUANTITIES` of :func:`qae_lab.analysis.phenomena.k_sweep_rows` against K, mean +- std.

    >>> from qae_lab.analysis.stats import stat
    >>> rows = [{"k": 0.2, "pass@1": stat([0.25, 0.75])}, {"k": 0.4, "pass@1": stat([0.5, 0.5])}]
    >>> k_sweep_lines(rows, "pass@1")
    Lines(x=[0.2, 0.4], y={'pass@1': [0.5, 0.5]}, bands={'pass@1': [0.25, 0.0]})
    """
    if quantity not in K_SWEEP_QUANTITIES:
        raise ValueError(f"quantity must be one of {K_SWEEP_QUANTITIES}, got {quantity!r}")
    missing = [r["k"] for r in rows if r.get(quantity) is None]
    if missing:
        raise ValueError(f"no {quantity} at K = {', '.join(map(str, missing))} (runs without it?)")
    return Lines(
        [r["k"] for r in rows],
        {quantity: [r[quantity].mean for r in rows]},
        {quantity: [r[quantity].std for r in rows]},
    )


def curves_figure(
    runs: Iterable,
    metric: str,
    window: int,
    *,
    labels: Mapping[str, str],
    title: str,
    y_title: str = "{label}",
    stride: int = 1,
) -> go.Figure:
    r"""``metric`` of every group of ``runs`` per step, mean +- std over seeds, after a trailing ``window``-step average
    (:func:`qae_lab.analysis.compare.metric_curves`); ``title``, ``y_title``: templates of ``{metric}``, ``{label}``
    (``labels[metric]``), ``{window}``.

    >>> from qae_lab.analysis.compare import Run
    >>> runs = [Run(f"qae-seed{s}", "qae", s, {}, [{"step": t, "reward": 0.1 * s} for t in (1, 2)], None, None)
    ...         for s in (0, 1)]
    >>> fig = curves_figure(runs, "reward", 1, labels={"reward": "mean reward"}, title="{label}, {window} step")
    >>> fig.layout.title.text, fig.layout.yaxis.title.text, [round(y, 3) for y in fig.data[1].y]
    ('mean reward, 1 step', 'mean reward', [0.05, 0.05])
    """
    if metric not in labels:
        raise ValueError(f"metric must be one of {list(labels)}, got {metric!r}")
    words = {"metric": metric, "label": labels[metric], "window": window}
    return band_figure(
        metric_curves(runs, metric, window), y_title=y_title.format(**words), stride=stride, title=title.format(**words)
    )


def pass_at_k_figure(
    table: Mapping, *, title: str = "pass@k before and after training, mean over seeds ± std"
) -> go.Figure:
    r""":func:`pass_at_k_lines` on a log axis, a tick per k, the line before training dashed.

    >>> from qae_lab.analysis.stats import stat
    >>> table = {"qae": {"before": {1: stat([0.4]), 4: stat([0.7])}, "after": {1: stat([0.5]), 4: stat([0.8])}}}
    >>> fig = pass_at_k_figure(table)
    >>> [t.name for t in fig.data if t.name], fig.data[-1].line.dash, list(fig.layout.xaxis.tickvals)
    (['qae, after', 'before (every method)'], 'dash', [1, 4])
    """
    lines = pass_at_k_lines(table)
    fig = line_figure(
        lines.x, lines.y, bands=lines.bands, markers=True, x_title="k (samples)", y_title="pass@k", title=title
    )
    fig.update_xaxes(type="log", tickvals=lines.x)  # one tick per k drawn
    fig.update_traces(line_dash="dash", selector={"name": BEFORE})
    return fig


def k_sweep_figure(rows: Sequence[Mapping], quantity: str) -> go.Figure:
    r"""One quantity of a K sweep against K, mean over seeds +- std (:func:`k_sweep_lines`).

    >>> from qae_lab.analysis.stats import stat
    >>> fig = k_sweep_figure([{"k": 0.2, "pass@1": stat([0.4, 0.6])}, {"k": 0.8, "pass@1": stat([0.5])}], "pass@1")
    >>> list(fig.data[-1].x), list(fig.data[-1].y), fig.layout.title.text
    ([0.2, 0.8], [0.5, 0.5], 'pass@1 after training against K')
    """
    lines = k_sweep_lines(rows, quantity)
    return line_figure(
        lines.x,
        lines.y,
        bands=lines.bands,
        markers=True,
        x_title="K",
        y_title=quantity,
        title=f"{quantity} after training against K",
    )


def before_after_figure(table: Sequence[Mapping], metric: str) -> go.Figure:
    r"""``metric`` before and after training, mean +- std bars, for each :func:`qae_lab.analysis.compare.summary_table`
    row evaluated both times.

    >>> from qae_lab.analysis.stats import stat
    >>> table = [{"method": "qae", "pass@1 before": stat([0.3]), "pass@1 after": stat([0.5, 0.7])},
    ...          {"method": "mine", "pass@1 before": None, "pass@1 after": stat([0.6])}]
    >>> fig = before_after_figure(table, "pass@1")
    >>> [(t.name, list(t.x), list(t.y), list(t.error_y.array)) for t in fig.data]
    [('before', ['qae'], [0.3], [0.0]), ('after', ['qae'], [0.6], [0.09999999999999998])]
    """
    shown = [row for row in table if row[f"{metric} before"] and row[f"{metric} after"]]
    stats = {when: [row[f"{metric} {when}"] for row in shown] for when in ("before", "after")}
    fig = bar_figure(
        [row["method"] for row in shown],
        {when: [s.mean for s in ss] for when, ss in stats.items()},
        title=f"{metric} before and after training (mean over seeds ± std)",
        y_title=metric,
    )
    for trace, ss in zip(fig.data, stats.values()):
        trace.error_y = {"type": "data", "array": [s.std for s in ss]}
    return fig


def detrend_figure(runs: Iterable, run: str, window: int, *, stride: int = 1) -> go.Figure:
    r"""One run's reward per step with its trailing ``window``-step average; the title gives the detrended variance
    (:func:`qae_lab.analysis.stats.detrended_variance`) and the plain one.

    >>> from qae_lab.analysis.compare import Run
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
    fig = line_figure(
        steps[::stride],
        {"reward per step": x[::stride], f"trailing average, {window} steps": m[::stride]},
        x_title="step",
        y_title="mean reward of the step's completions",
        title=run,
    )
    if len(x) > window:
        fig.update_layout(
            title=f"{run}: detrended variance {detrended_variance(x, window):.4f} (window {window}), "
            f"plain variance {statistics.pvariance(x):.4f}"
        )
    return fig


def _problems(result) -> list[dict]:
    """An evaluation's per-problem records: an :class:`~qae_lab.task.evaluate.EvalResult`, or the path of its JSON."""
    if isinstance(result, (str, os.PathLike)):
        return EvalResult.from_json(result).problems  # a damaged file is named
    return result.problems


def paired_completions(before, after, n: int = 4, sample: int | None = None) -> list[dict]:
    r"""The first ``n`` problems of two evaluations (EvalResults or their JSON paths) paired, with the greedy (or the
    ``sample``-th sampled) completion and verdict of each.

    >>> res = lambda ok: {"problems": [{"id": 0, "question": "1 + 1?", "gold": "2",
    ...     "greedy": {"completion": "2", "correct": ok}, "samples": [{"completion": "3", "correct": False}]}]}
    >>> from types import SimpleNamespace as NS
    >>> paired_completions(NS(problems=res(False)["problems"]), NS(problems=res(True)["problems"]))
    [{'question': '1 + 1?', 'gold': '2', 'before': '2', 'before_correct': False, 'after': '2', 'after_correct': True}]
    """
    check_int(n, "n", 1)
    old, new = _problems(before), _problems(after)
    if [(p["id"], p["question"]) for p in old] != [(p["id"], p["question"]) for p in new]:
        raise ValueError("before and after must evaluate the same problems in the same order")
    rows = []
    for p, q in zip(old[:n], new[:n]):
        pick = [(r["greedy"] if sample is None else r["samples"][sample]) for r in (p, q)]
        if None in pick:
            raise ValueError("the evaluations have no greedy completions: pass sample=0 for a sampled one")
        rows.append(
            {
                "question": p["question"],
                "gold": p["gold"],
                "before": pick[0]["completion"],
                "before_correct": bool(pick[0]["correct"]),
                "after": pick[1]["completion"],
                "after_correct": bool(pick[1]["correct"]),
            }
        )
    return rows


def regime_figure(runs: Sequence, mean_method: str, quantile_method: str, quantity: str = "entropy") -> go.Figure:
    r"""QAE's Prop. 4.2 (arXiv 2509.22611) in training: hard | easy | mixed held-out groups
    (:mod:`qae_lab.train.regime_eval`), ``regime_eval/<quantity>_*`` mean +- std over seeds against updates, under
    the mean- and the quantile-baseline method; ``quantity``: ``"entropy"`` or ``"success"``.

    >>> from qae_lab.analysis.compare import Run
    >>> rows = lambda v: [{"step": 1, **{f"regime_eval/entropy_{g}": 0.2 for g in ("hard", "easy", "all")},
    ...                    **{f"regime_eval/success_{g}": 0.5 for g in ("hard", "easy", "all")}},
    ...                   {"step": 11, **{f"regime_eval/entropy_{g}": v for g in ("hard", "easy", "all")}}]
    >>> runs = [Run(f"{m}-seed{s}", m, s, {}, rows(0.2 + 0.01 * s), None, None) for m in ("mean", "qae") for s in (0, 1)]
    >>> fig = regime_figure(runs, "mean", "qae")
    >>> [t.name for t in fig.data if t.showlegend is not False], len(fig.data)
    (['mean (2 seeds)', 'qae (2 seeds)'], 12)
    """
    if quantity not in ("entropy", "success"):
        raise ValueError(f"quantity must be 'entropy' or 'success', got {quantity!r}")
    runs = [r for r in runs if r.method in (mean_method, quantile_method)]
    groups = ("hard", "easy", "all")
    titles = []
    for g in groups:
        start = stat((regime_eval_numbers(r, g, "success") or {}).get("start") for r in runs)
        which = {"hard": "hardest quarter", "easy": "easiest quarter", "all": "all held-out prompts"}[g]
        titles.append(f"{GROUP_WORDS[g]}: {which}" + (f"<br>(start success {start.mean:.2f})" if start else ""))
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles, horizontal_spacing=0.07)
    n_seeds = 0
    for col, g in enumerate(groups, start=1):
        curves = regime_eval_curves(runs, g, quantity)
        for i, method in enumerate((mean_method, quantile_method)):
            c, color = curves.get(method), PALETTE[i % len(PALETTE)]
            if c is None:
                continue
            n_seeds = max(n_seeds, c.n_runs)
            name = f"{method} ({c.n_runs} seed{'s' * (c.n_runs != 1)})"
            add_band_line(fig, c.steps, c.mean, c.std, color, name, method, col, mode="lines+markers")
    words = {"entropy": "token entropy (nats)", "success": "success rate"}[quantity]
    title = (
        f"Held-out prompts grouped by start success: {words} under {mean_method} vs {quantile_method}; "
        f"mean ± std over {n_seeds} seeds"
    )
    fig.update_xaxes(title_text="updates")
    fig.update_yaxes(title_text=words, row=1, col=1)
    fig.update_layout(
        title={"text": wrap_title(title, 100), "font": {"size": 15}},
        template="plotly_white",
        height=460,
        margin={"l": 60, "r": 20, "t": 150, "b": 110},  # a two-line title above two-line panel titles
        legend={"orientation": "h", "yanchor": "top", "y": -0.22},
    )
    return fig


def prompt_group_name(group: str, meta: Mapping) -> str:
    """A group of prompts by name and size, as notebook 07's figures call it.

    >>> prompt_group_name("hard", {"n_group": 4, "n_prompts": 16})
    'hard: the 4 hardest of 16'
    """
    n, n_prompts = meta["n_group"], meta["n_prompts"]
    which = {
        "hard": f"the {n} hardest of {n_prompts}",
        "easy": f"the {n} easiest of {n_prompts}",
        "mixed": f"all {n_prompts} prompts",
    }[group]
    return f"{group}: {which}"


def _group_title(group: str, meta: Mapping, p0: float) -> str:
    """A panel's title: which prompts, how many, their start success rate."""
    return f"{prompt_group_name(group, meta)}<br>(start p {p0:.2f})"


def regimes_figure(regimes: Mapping, optimizer: str = "adam", clip_higher: bool = True) -> go.Figure:
    r"""QAE's Proposition 4.2 by regime in training: hard | easy | mixed panels of the committed runs' entropy, mean
    +- std over seeds, under the mean and the quantile baseline (:func:`qae_lab.analysis.seqpolicy_runs.load_regimes`).

    >>> from qae_lab.analysis.seqpolicy_runs import load_regimes
    >>> fig = regimes_figure(load_regimes(), "adam", True)
    >>> [t.name for t in fig.data if t.showlegend is not False]
    ['mean baseline (16 seeds)', 'quantile baseline, K = 0.4 (16 seeds)']
    """
    meta, runs = regimes["meta"], regimes["runs"]
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    names = {
        "mean baseline": setting_name(optimizer, "mean", meta["k"], bool(clip_higher)),
        f"quantile baseline, K = {meta['k']:g}": setting_name(optimizer, "quantile", meta["k"], bool(clip_higher)),
    }
    groups = {label: runs[name]["groups"] for label, name in names.items()}
    first = next(iter(groups.values()))
    titles = [_group_title(g, meta, sum(first[g]["start_p"]) / len(first[g]["start_p"])) for g in REGIMES]
    fig = make_subplots(rows=1, cols=len(REGIMES), shared_yaxes=True, subplot_titles=titles, horizontal_spacing=0.04)
    for i, (label, by_group) in enumerate(groups.items()):
        color = PALETTE[i % len(PALETTE)]
        for col, group in enumerate(REGIMES, start=1):
            c = by_group[group]["entropy_curve"]
            add_band_line(fig, c["steps"], c["mean"], c["std"], color, f"{label} ({c['n']} seeds)", label, col)
    opt = {
        "adam": f"Adam, learning rate {meta['adam_eta']:g}, {meta['adam_passes']} passes",
        "sgd": f"SGD, learning rate {meta['sgd_eta']:g}, {meta['sgd_passes']} passes",
    }[optimizer]
    n_seeds = first["mixed"]["entropy_curve"]["n"]
    title = (
        f"Entropy H(pi) of the prompts hard / easy at the start, mean vs quantile baseline<br>{opt}, Clip-Higher "
        f"{'on' if clip_higher else 'off'}; mean ± std over {n_seeds} seeds"
    )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="H(pi) (nats)", row=1, col=1)
    # px: the title's lines at the top, the panels' two-line titles under it, "step" and the legend below the panels
    top, bottom, plot_h = 125, 100, 300
    height = top + plot_h + bottom
    fig.update_layout(
        title={"text": wrap_title(title, 100), "font": {"size": 15}, "y": 1 - 12 / height, "yanchor": "top"},
        template="plotly_white",
        height=height,
        margin={"l": 60, "r": 20, "t": top, "b": bottom},
        legend={"orientation": "h", "yanchor": "top", "y": -60 / plot_h},
    )
    return fig
