r"""Numbers of training runs: smoothing over steps, training variance, mean and spread over seeds.

Pure Python on lists of floats (no torch): :mod:`qae_lab.analysis.compare` applies these to run folders.

Training variance. SA-AH-GRPO (arXiv 2606.05434) reports a "training variance" (3B: 0.0885 for GRPO, 0.0246 for
SA-AH-GRPO) without a formula. Ours, :func:`training_variance`, is a decision, not the paper's definition: the
population variance over training steps of the per-step mean reward x_t around its trailing moving average m_t over
``window`` steps (:func:`detrended_variance`).

Implementer's notes: docs/implementation.md, section ``qae_lab.analysis.stats``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from qae_lab._checks import check_int

__all__ = ["moving_average", "detrended_variance", "training_variance", "Stat", "stat", "within_spread"]


# ---------------------------------------------------------------- over steps


def _values(values: Sequence[float], name: str) -> list[float]:
    try:
        xs = [float(v) for v in values]
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a sequence of real numbers") from err
    if not xs or not all(math.isfinite(x) for x in xs):
        raise ValueError(f"{name} must be a non-empty sequence of finite numbers, got {len(xs)} values")
    return xs


def moving_average(values: Sequence[float], window: int) -> list[float]:
    r"""Trailing moving average: m_t = mean(x_{max(0, t-w+1)} .. x_t), a shorter window for the first w-1 steps.

    >>> moving_average([0, 2, 4, 6], 2)
    [0.0, 1.0, 3.0, 5.0]
    """
    xs = _values(values, "values")
    w = check_int(window, "window", 1)
    out, total = [], 0.0
    for t, x in enumerate(xs):
        total += x - (xs[t - w] if t >= w else 0.0)  # running sum of the last w values
        out.append(total / min(t + 1, w))
    return out


def detrended_variance(values: Sequence[float], window: int) -> float:
    r"""Population variance of r_t = x_t - m_t (m: the trailing ``window``-step average) over the full windows.

    ``values``: n >= window + 1 finite x_t (at least two residuals); ``window`` w >= 2.

    >>> detrended_variance([0, 2, 0, 2, 0], 2)    # r = 1, -1, 1, -1
    1.0
    >>> detrended_variance([0, 1, 2, 3, 4], 2)    # a steady trend is not variance
    0.0
    """
    xs = _values(values, "values")
    w = check_int(window, "window", 2, max(len(xs) - 1, 2))
    if len(xs) < w + 1:
        raise ValueError(f"values must hold at least window + 1 = {w + 1} steps, got {len(xs)}")
    m = moving_average(xs, w)
    # r_t = x_t - m_t, t = w-1 .. n-1 (full windows only)
    r = [x - mt for x, mt in zip(xs[w - 1 :], m[w - 1 :])]
    return statistics.pvariance(r)


def training_variance(
    rows: Sequence[Mapping], metric: str = "reward", window: int = 20, *, detrend: bool = True
) -> float:
    r"""Training variance of ``metric`` over the steps of a log that hold it (the module docstring: our definition);
    ``detrend=False``: the plain population variance.

    >>> rows = [{"step": t, "reward": x} for t, x in enumerate([0.0, 0.5, 0.0, 0.5, 0.0], 1)]
    >>> training_variance(rows, window=2), training_variance(rows, detrend=False)
    (0.0625, 0.06)
    """
    if not isinstance(metric, str):
        raise ValueError(f"metric must be a metric name (str), got {metric!r}")
    xs = [r[metric] for r in rows if r.get(metric) is not None]
    if not xs:
        raise ValueError(f"rows hold no values of metric {metric!r}")
    if not detrend:
        return statistics.pvariance(_values(xs, "rows"))
    return detrended_variance(xs, window)


# ---------------------------------------------------------------- over seeds


class Stat(NamedTuple):
    r"""Mean and spread of one number over a method's seeds: population std and range [lo, hi], and the ``values``
    themselves (for an interval of a difference: :func:`qae_lab.analysis.claims.difference`).

    >>> print(Stat(mean=0.6, std=0.1, lo=0.5, hi=0.7, n=2))
    0.600±0.100
    """

    mean: float
    std: float
    lo: float
    hi: float
    n: int
    values: tuple = ()

    def __str__(self) -> str:
        return f"{self.mean:.3f}±{self.std:.3f}"


def stat(values: Iterable[float | None]) -> Stat | None:
    r"""The :class:`Stat` of the values that are not None; None when there are none.

    >>> s = stat([0.5, 0.7, None]); (round(s.mean, 9), round(s.std, 9), s.lo, s.hi, s.n)
    (0.6, 0.1, 0.5, 0.7, 2)
    """
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return Stat(statistics.fmean(xs), statistics.pstdev(xs), min(xs), max(xs), len(xs), tuple(xs))


def within_spread(a: Stat, b: Stat) -> bool | None:
    r"""Whether two methods' seed ranges overlap (their difference is within seed spread); None with < 2 seeds.

    >>> within_spread(stat([0.58, 0.59]), stat([0.585, 0.60])), within_spread(stat([0.5]), stat([0.6]))
    (True, None)
    """
    if a.n < 2 or b.n < 2:
        return None
    return a.lo <= b.hi and b.lo <= a.hi
