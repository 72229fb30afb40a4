r"""Notebook 05's tables about groups of runs: how a metric moved from the first to the last steps, the reward's
plain variance, and what sampling alone gives a step's mean reward.

The groups are :func:`qae_lab.analysis.grouping.group_runs`'; each function returns table rows (the figures are
:mod:`qae_lab.lab.run_figures`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

from qae_lab.analysis.compare import Run, metric_curves, series
from qae_lab.analysis.stats import stat, training_variance

__all__ = ["first_last_rows", "plain_variance_rows", "sampling_floor", "column_row"]


def first_last_rows(groups: Sequence, metric: str, window: int) -> list[dict]:
    r"""Per group with ``window`` steps of ``metric``: the trailing ``window``-step average (mean over seeds) at step
    ``window`` and at the last step, and their ratio.

    >>> runs = [Run("qae-seed0", "qae", 0, {}, [{"step": t, "entropy": 0.1 / t} for t in range(1, 5)], None, None)]
    >>> [(r["group"], round(r["first"], 4), round(r["last"], 4), round(r["last / first"], 3))
    ...  for r in first_last_rows(runs, "entropy", 2)]
    [('qae', 0.075, 0.0292, 0.389)]
    """
    rows = []
    for label, c in metric_curves(groups, metric, window).items():
        if len(c.steps) < window:
            continue
        first, last = c.mean[window - 1], c.mean[-1]  # trailing averages at step `window` and at the last step
        rows.append({"group": label, "first": first, "last": last, "last / first": last / first if first else None})
    return rows


def plain_variance_rows(groups: Sequence) -> list[dict]:
    r"""Per group, the plain variance of the reward over all steps (trend included), a Stat over seeds.

    >>> from qae_lab.analysis.grouping import group_runs
    >>> rows = [{"step": t, "reward": x} for t, x in enumerate([0.0, 0.5, 0.0, 0.5], 1)]
    >>> r = plain_variance_rows(group_runs([Run("mean-seed0", "mean", 0, {}, rows, None, None)]))[0]
    >>> r["group"], r["plain variance"].mean
    ('mean', 0.0625)
    """
    return [
        {"group": g.label, "plain variance": stat(training_variance(r.rows, detrend=False) for r in g.runs)}
        for g in groups
    ]


def sampling_floor(runs: Iterable[Run]) -> float:
    r"""What sampling alone adds to a step's mean reward: p(1-p)/N (N 0/1 rewards at rate p), averaged over steps.

    >>> sampling_floor([Run("r", "qae", 0, {"trainer": {"generation_batch_size": 4}},
    ...                     [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 1.0}], None, None)])
    0.03125
    """
    values = [p * (1 - p) / r.config["trainer"]["generation_batch_size"] for r in runs for p in series(r, "reward")[1]]
    if not values:
        raise ValueError("runs hold no rewards")
    return statistics.fmean(values)


def column_row(table: Sequence[Mapping], method: str, column: str) -> Mapping:
    r"""The first :func:`qae_lab.analysis.compare.summary_table` row labelled ``method``, which must have ``column``.

    >>> column_row([{"method": "qae", "x": stat([0.03, 0.05])}], "qae", "x")["method"]
    'qae'
    """
    rows = [row for row in table if row["method"] == method]
    if not rows:
        raise ValueError(f"method must label a row of the table, one of {[r['method'] for r in table]}, got {method!r}")
    if rows[0].get(column) is None:
        raise ValueError(f"column {column!r} has no value in the row of {method!r}")
    return rows[0]
