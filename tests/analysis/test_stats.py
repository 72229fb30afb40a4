"""Tests for qae_lab.analysis.stats: moving averages, training variance, mean and spread over seeds. The
numbers are worked out by hand or by an independent loop / ``statistics`` reference."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qae_lab.analysis.stats import detrended_variance, moving_average, stat, training_variance, within_spread

# ---------------------------------------------------------------- independent references


def ref_moving_average(xs, w):
    """Loop: the mean of the last w values (fewer at the start)."""
    out = []
    for t in range(len(xs)):
        window = xs[max(0, t - w + 1) : t + 1]
        out.append(sum(window) / len(window))
    return out


def ref_detrended_variance(xs, w):
    """Residuals from full trailing windows only, then statistics.pvariance."""
    res = [xs[t] - sum(xs[t - w + 1 : t + 1]) / w for t in range(w - 1, len(xs))]
    return statistics.pvariance(res)


def log_rows(rewards, **metrics):
    """Step rows 1..n with the given rewards and per-step metric lists."""
    return [
        {"step": t + 1, "reward": r, **{k.replace("__", "/"): v[t] for k, v in metrics.items()}}
        for t, r in enumerate(rewards)
    ]


# ---------------------------------------------------------------- moving average and variance


def test_moving_average_by_hand():
    assert moving_average([1, 3, 5, 7, 9], 3) == [1.0, 2.0, 3.0, 5.0, 7.0]
    assert moving_average([4.0, 2.0], 1) == [4.0, 2.0]
    assert moving_average([2.0, 4.0], 10) == [2.0, 3.0]  # a window longer than the log: the running mean


@given(st.lists(st.floats(-10, 10), min_size=1, max_size=40), st.integers(1, 12))
def test_moving_average_matches_loop(xs, w):
    assert moving_average(xs, w) == pytest.approx(ref_moving_average(xs, w), abs=1e-9)


def test_detrended_variance_by_hand():
    # w = 3: m_2 = 1, m_3 = 2, m_4 = 1 -> r = [-1, 1, -1], mean -1/3, variance (4/9 + 16/9 + 4/9) / 3 = 8/9
    assert detrended_variance([0, 3, 0, 3, 0], 3) == pytest.approx(8 / 9)
    assert detrended_variance([1, 1, 1, 1], 2) == 0.0


@given(st.lists(st.floats(-5, 5), min_size=3, max_size=40), st.integers(2, 10), st.floats(-1, 1))
def test_detrended_variance_matches_reference_and_ignores_a_linear_trend(xs, w, slope):
    w = min(w, len(xs) - 1)
    assert detrended_variance(xs, w) == pytest.approx(ref_detrended_variance(xs, w), abs=1e-9)
    # a trend a + b t shifts every full-window residual by the same b (w-1)/2: the variance is unchanged
    trended = [x + 3.0 + slope * t for t, x in enumerate(xs)]
    assert detrended_variance(trended, w) == pytest.approx(detrended_variance(xs, w), abs=1e-7)


def test_training_variance_detrended_and_plain():
    rewards = [0.2, 0.6, 0.3, 0.7, 0.4, 0.8]
    rows = log_rows(rewards) + [{"step": 6, "train_runtime": 3.0}, {"step": 7, "reward": None}]
    assert training_variance(rows, window=2) == pytest.approx(ref_detrended_variance(rewards, 2))
    assert training_variance(rows, detrend=False) == pytest.approx(statistics.pvariance(rewards))
    rising = log_rows([0.1 * t for t in range(10)])  # pure learning trend
    assert training_variance(rising, window=3) == pytest.approx(0.0, abs=1e-12)
    assert training_variance(rising, detrend=False) == pytest.approx(statistics.pvariance([0.1 * t for t in range(10)]))
    ent = log_rows([0.0] * 4, entropy=[1.0, 2.0, 1.0, 2.0])
    # m = [1, 1.5, 1.5, 1.5] -> r = [.5, -.5, .5], mean 1/6, variance (1/9 + 4/9 + 1/9) / 3 = 2/9
    assert training_variance(ent, "entropy", 2) == pytest.approx(2 / 9)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: moving_average([1.0, 2.0], 0), "window"),
        (lambda: moving_average([1.0, 2.0], 2.0), "window"),
        (lambda: moving_average([1.0, 2.0], True), "window"),
        (lambda: moving_average([], 2), "values"),
        (lambda: moving_average([1.0, math.nan], 2), "values"),
        (lambda: moving_average(["a"], 2), "values"),
        (lambda: detrended_variance([1.0, 2.0, 3.0], 1), "window"),
        (lambda: detrended_variance([1.0, 2.0, 3.0], 3), "window"),
        (lambda: detrended_variance([1.0, 2.0], 2), "values"),
        (lambda: training_variance(log_rows([0.1, 0.2, 0.3]), "entropy"), "metric"),
        (lambda: training_variance(log_rows([0.1, 0.2, 0.3]), 3), "metric"),
        (lambda: training_variance(log_rows([0.1, 0.2, 0.3]), window=-1), "window"),
    ],
)
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# ---------------------------------------------------------------- over seeds


def test_stat_and_within_spread():
    s = stat([0.2, None, 0.6])
    assert (s.mean, s.std, s.lo, s.hi, s.n) == pytest.approx((0.4, 0.2, 0.2, 0.6, 2))
    assert stat([None]) is None
    assert within_spread(stat([0.5, 0.6]), stat([0.55, 0.7])) is True
    assert within_spread(stat([0.5, 0.6]), stat([0.65, 0.7])) is False
    assert within_spread(stat([0.5]), stat([0.5, 0.6])) is None
