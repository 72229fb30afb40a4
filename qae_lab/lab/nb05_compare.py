r"""Notebook 05's sentences about groups of runs: how a metric moved from the first to the last steps, the
reward's variance beside what sampling alone gives, and the behaviour of the composite-reward runs.

The groups are :func:`qae_lab.analysis.grouping.group_runs`'; the numbers come from :mod:`qae_lab.analysis.compare`,
:mod:`qae_lab.analysis.phenomena` and :mod:`qae_lab.analysis.stats`. Each function returns the lines the notebook
prints; nothing here imports plotly or ipywidgets (the figures are :mod:`qae_lab.lab.run_figures`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

from qae_lab.analysis.compare import Run, metric_curves, series
from qae_lab.analysis.phenomena import window_mean
from qae_lab.analysis.stats import stat, training_variance

__all__ = [
    "runs_logging",
    "first_last_lines",
    "plain_variance_lines",
    "variance_ratio_line",
    "sampling_floor",
    "behaviour_lines",
    "column_stat",
    "summary_lines",
]

_CHANGES = (None, "percent", "direction")


def runs_logging(runs: Iterable[Run], metric: str, rows: int = 2) -> list[Run]:
    r"""The runs whose first ``rows`` log rows hold ``metric`` (older runs logged fewer metrics).

    >>> runs = [Run("a", "qae", 0, {}, [{"step": 1, "ledger/dh": 0.1}], None, None),
    ...         Run("b", "qae", 1, {}, [{"step": 1, "reward": 0.5}], None, None)]
    >>> [r.name for r in runs_logging(runs, "ledger/dh")]
    ['a']
    """
    return [r for r in runs if any(metric in row for row in r.rows[:rows])]


def first_last_lines(
    groups: Sequence, metric: str, window: int, *, name: str, digits: int = 3, change: str | None = None, width: int = 0
) -> list[str]:
    r"""Per group that logged ``metric`` for at least ``window`` steps: its mean over seeds of the trailing
    ``window``-step average at step ``window`` ("first ``window`` steps") and at the last step.

    Args:
        groups: :func:`qae_lab.analysis.grouping.group_runs` groups (or runs, grouped by it).
        name: the metric in words; digits: decimals; width: the label column's width.
        change: ``"percent"`` adds the relative change, ``"direction"`` says rose / fell / unchanged.

    >>> runs = [Run("qae-seed0", "qae", 0, {}, [{"step": t, "entropy": 0.1 / t} for t in range(1, 5)], None, None)]
    >>> first_last_lines(runs, "entropy", 2, name="entropy", digits=4, change="percent")
    ['qae entropy, first 2 steps 0.0750 -> last 2 steps 0.0292 (-61%)']
    """
    if change not in _CHANGES:
        raise ValueError(f"change must be one of {_CHANGES}, got {change!r}")
    lines = []
    for label, c in metric_curves(groups, metric, window).items():
        if len(c.steps) < window:
            continue
        start, end = c.mean[window - 1], c.mean[-1]  # trailing averages at step `window` and at the last step
        line = (
            f"{label:<{width}} {name}, first {window} steps {start:.{digits}f} -> last {window} steps {end:.{digits}f}"
        )
        if change == "percent":
            line += f" ({end / start - 1:+.0%})"
        elif change == "direction":
            line += ": " + ("rose" if end > start else "fell" if end < start else "unchanged")
        lines.append(line)
    return lines


def plain_variance_lines(groups: Sequence, width: int = 0) -> list[str]:
    r"""Per group, the plain variance of the reward over all steps (the learning trend included), mean ± std
    over seeds (:func:`qae_lab.analysis.stats.training_variance` with ``detrend=False``).

    >>> from qae_lab.analysis.grouping import group_runs
    >>> rows = [{"step": t, "reward": x} for t, x in enumerate([0.0, 0.5, 0.0, 0.5], 1)]
    >>> plain_variance_lines(group_runs([Run("mean-seed0", "mean", 0, {}, rows, None, None)]))
    ['  mean 0.062±0.000']
    """
    return [f"  {g.label:<{width}} {stat(training_variance(r.rows, detrend=False) for r in g.runs)}" for g in groups]


def variance_ratio_line(table: Sequence[Mapping], a: str = "mean", b: str = "sa_ah") -> str | None:
    r"""GRPO's detrended training variance over SA-AH's (``train var`` of :func:`qae_lab.analysis.compare.summary_table`
    rows ``a`` and ``b``), beside the paper's 3.6x; None when either row is missing.

    >>> from qae_lab.analysis.stats import stat
    >>> print(variance_ratio_line([{"method": "mean", "train var": stat([0.012])},
    ...                            {"method": "sa_ah", "train var": stat([0.010])}]))
    GRPO / SA-AH detrended variance: 1.20x (the paper's 3B runs: 3.6x)
    """
    byname = {row["method"]: row["train var"] for row in table}
    if not byname.get(a) or not byname.get(b):
        return None
    return f"GRPO / SA-AH detrended variance: {byname[a].mean / byname[b].mean:.2f}x (the paper's 3B runs: 3.6x)"


def sampling_floor(runs: Iterable[Run]) -> float:
    r"""What sampling alone adds to a step's mean reward: p(1-p)/N for a step of N independent 0/1 rewards at
    success rate p (the step's mean reward), averaged over every step of ``runs`` (N: ``generation_batch_size``).

    >>> sampling_floor([Run("r", "qae", 0, {"trainer": {"generation_batch_size": 4}},
    ...                     [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 1.0}], None, None)])
    0.03125
    """
    values = [p * (1 - p) / r.config["trainer"]["generation_batch_size"] for r in runs for p in series(r, "reward")[1]]
    if not values:
        raise ValueError("runs hold no rewards")
    return statistics.fmean(values)


def behaviour_lines(groups: Sequence, edge: int = 20, width: int = 34) -> list[str]:
    r"""Per group: the mean completion length over its first and its last ``edge`` steps and the share of
    completions with a reflective word over all steps (``behaviour/*``), means over seeds.

    >>> from qae_lab.analysis.grouping import group_runs
    >>> rows = [{"step": t, "behaviour/length_mean": 10.0 * t, "behaviour/reflect_frac": 0.5} for t in range(1, 5)]
    >>> behaviour_lines(group_runs([Run("sa_ah-seed0", "sa_ah", 0, {}, rows, None, None)]), edge=2, width=6)
    ['sa_ah  length first 2 steps 15.0 -> last 2 35.0 tokens; share with a reflective word 0.500']
    """
    lines = []
    for g in groups:
        first = stat(window_mean(r.rows, "behaviour/length_mean", 1, edge) for r in g.runs)
        last = stat(window_mean(r.rows, "behaviour/length_mean", max(1, g.steps - edge + 1)) for r in g.runs)
        refl = stat(window_mean(r.rows, "behaviour/reflect_frac") for r in g.runs)
        lines.append(
            f"{g.label:<{width}} length first {edge} steps {first.mean:.1f} -> last {edge} {last.mean:.1f} "
            f"tokens; share with a reflective word {refl.mean:.3f}"
        )
    return lines


def column_stat(table: Sequence[Mapping], method: str, column: str):
    r"""The :class:`~qae_lab.analysis.stats.Stat` over seeds (mean, std, range) of ``column`` in the
    :func:`qae_lab.analysis.compare.summary_table` row labelled ``method``.

    Raises:
        ValueError: no row labelled ``method``, or that row has no value in ``column``.

    >>> s = column_stat([{"method": "qae", "final entropy": stat([0.03, 0.05])}], "qae", "final entropy")
    >>> round(s.mean, 6), round(s.std, 6), s.n
    (0.04, 0.01, 2)
    """
    rows = [row for row in table if row["method"] == method]
    if not rows:
        raise ValueError(f"method must label a row of the table, one of {[r['method'] for r in table]}, got {method!r}")
    value = rows[0].get(column)
    if value is None:
        raise ValueError(f"column {column!r} has no value in the row of {method!r}")
    return value


_SUMMARY = (
    ("sampled pass@1", "pass@1 before", "pass@1 after", 3),
    ("final entropy", None, "final entropy", 4),
    ("detrended training variance", None, "train var", 4),
    ("zero-advantage fraction", None, "zero-adv frac", 3),
)


def summary_lines(table: Sequence[Mapping]) -> list[str]:
    r"""Notebook 05's closing summary: per row of :func:`qae_lab.analysis.compare.summary_table`, its seeds, sampled pass@1
    before and after training, the final entropy, the detrended training variance and the zero-advantage
    fraction, each the mean over seeds (columns without a value are left out).

    >>> table = [{"method": "qae", "seeds": 2, "pass@1 before": stat([0.25]), "pass@1 after": stat([0.5, 0.6]),
    ...           "final entropy": stat([0.04]), "train var": None, "zero-adv frac": stat([0.8])}]
    >>> summary_lines(table)
    ['qae (2 seeds): sampled pass@1 0.250 before -> 0.550 after; final entropy 0.0400; zero-advantage fraction 0.800']
    """
    lines = []
    for row in table:
        parts = []
        for name, start, end, digits in _SUMMARY:
            if row.get(end) is None:
                continue
            if start and row.get(start) is not None:
                parts.append(f"{name} {row[start].mean:.{digits}f} before -> {row[end].mean:.{digits}f} after")
            else:
                parts.append(f"{name} {row[end].mean:.{digits}f}")
        seeds = f"{row['seeds']} seed{'s' if row['seeds'] != 1 else ''}"
        lines.append(f"{row['method']} ({seeds}): " + "; ".join(parts))
    return lines
