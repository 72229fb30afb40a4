r"""QAE's Prop. 4.2 in committed runs: the held-out groups' entropy under the mean and the quantile baseline.

The runs log ``regime_eval/*`` (:mod:`qae_lab.train.regime_eval`): a fixed held-out prompt set, grouped once by the
start model's success rate into its hardest and easiest quarter, measured before step 1 and every few steps. QAE
(arXiv 2509.22611), Prop. 4.2, for one softmax step on one prompt: on a hard prompt (p <= 1-K) the quantile
baseline's entropy change is at most the mean baseline's (no explosion), on an easy one (p > 1-K) at least (no
collapse). Pure Python on :class:`qae_lab.analysis.compare.Run` objects (the figure:
:func:`qae_lab.lab.run_figures.regime_figure`; the claims: :mod:`qae_lab.analysis.evidence`).
"""

from __future__ import annotations

from collections.abc import Sequence

from qae_lab.labels import GROUP_WORDS
from qae_lab.analysis.compare import Curve, Run, group_by_method, series
from qae_lab.metric_names import REGIME_GROUPS, regime_eval_metric
from qae_lab.analysis.stats import stat

__all__ = ["GROUP_WORDS", "regime_eval_curve", "regime_eval_curves", "regime_eval_numbers", "regime_eval_table"]

_NUMBERS = ("start", "peak/start", "final", "final/start")


def regime_eval_curve(run: Run, group: str, quantity: str = "entropy") -> tuple[list[int], list[float]]:
    r"""(updates, values) of a run's held-out ``group`` (one of :data:`qae_lab.metric_names.REGIME_GROUPS`):
    ``regime_eval/<quantity>_<group>`` against the number of updates the measured policy had (row S: S - 1).

    >>> run = Run("r", "qae", 0, {}, [{"step": 1, "regime_eval/entropy_hard": 0.2}, {"step": 2},
    ...                               {"step": 11, "regime_eval/entropy_hard": 0.3}], None, None)
    >>> regime_eval_curve(run, "hard")
    ([0, 10], [0.2, 0.3])
    """
    steps, values = series(run, regime_eval_metric(quantity, group))
    return [s - 1 for s in steps], values


def regime_eval_curves(runs: Sequence[Run], group: str, quantity: str = "entropy") -> dict[str, Curve]:
    r"""Per method, the held-out ``group``'s measurements over seeds, a :class:`qae_lab.analysis.compare.Curve`
    against the number of updates.

    >>> runs = [Run(f"r{s}", "qae", s, {}, [{"step": 1, "regime_eval/entropy_all": 0.2 + 0.1 * s}], None, None)
    ...         for s in (0, 1)]
    >>> c = regime_eval_curves(runs, "all")["qae"]; c.steps, [round(v, 3) for v in c.mean + c.std], c.n_runs
    ([0], [0.25, 0.05], 2)
    """
    out = {}
    for method, group_runs in group_by_method(runs).items():
        points = [p for r in group_runs if (p := dict(zip(*regime_eval_curve(r, group, quantity))))]
        if points and (curve := Curve.over(points)).steps:  # the steps every run measured
            out[method] = curve
    return out


def regime_eval_numbers(run: Run, group: str, quantity: str = "entropy") -> dict[str, float | None] | None:
    r"""A run's held-out ``group``: ``start`` (before any update), ``peak``, ``final`` and their ratios to the start
    (None when it is 0); None when the run has no measurement before its first update.

    >>> run = Run("r", "qae", 0, {}, [{"step": s, "regime_eval/entropy_easy": v} for s, v in ((1, 0.2), (5, 0.3),
    ...                                                                                     (9, 0.1))], None, None)
    >>> {k: round(v, 3) for k, v in regime_eval_numbers(run, "easy").items()}
    {'start': 0.2, 'peak': 0.3, 'final': 0.1, 'peak/start': 1.5, 'final/start': 0.5}
    """
    x, y = regime_eval_curve(run, group, quantity)
    if not x or x[0] != 0:
        return None
    start, peak, final = y[0], max(y), y[-1]
    ratios = {f"{k}/start": v / start if start else None for k, v in (("peak", peak), ("final", final))}
    return {"start": start, "peak": peak, "final": final, **ratios}


def regime_eval_table(runs: Sequence[Run], quantity: str = "entropy") -> list[dict]:
    r"""Per method and group: ``seeds`` and a :class:`~qae_lab.analysis.stats.Stat` over seeds of each of start,
    peak/start, final and final/start.

    >>> runs = [Run(f"r{s}", "mean", s, {}, [{"step": 1, "regime_eval/entropy_hard": 0.2},
    ...                                      {"step": 3, "regime_eval/entropy_hard": 0.2 + 0.1 * s}], None, None)
    ...         for s in (1, 2)]
    >>> row = regime_eval_table(runs)[0]
    >>> row["method"], row["group"], row["seeds"], round(row["peak/start"].mean, 3), round(row["final"].std, 3)
    ('mean', 'hard', 2, 1.75, 0.05)
    """
    rows = []
    for method, group_runs in group_by_method(runs).items():
        for group in REGIME_GROUPS:
            numbers = [n for n in (regime_eval_numbers(r, group, quantity) for r in group_runs) if n is not None]
            if numbers:
                rows.append(
                    {
                        "method": method,
                        "group": GROUP_WORDS[group],
                        "seeds": len(numbers),
                        **{key: stat(n[key] for n in numbers) for key in _NUMBERS},
                    }
                )
    return rows
