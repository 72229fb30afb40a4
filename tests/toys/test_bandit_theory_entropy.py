"""Tests for qae_lab.toys.bandit's entropy of the toy softmax bandit and its first-order change under a logit step.

Plain-Python references (tests/toys/theory_setup.py) stand in for the vectorised code; hand-derived two-action
cases pin the formulas.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from testkit.reference import ref_entropy

from qae_lab.toys.bandit import (
    entropy,
    entropy_change_exact,
    entropy_change_first_order,
    first_order_errors,
    loglog_slope,
)
from theory_setup import F64, LOG3, T, py_exact, py_first_order, random_policy


# ---------------------------------------------------------------- entropy and its first-order change


def test_entropy_matches_plain_python():
    rng = random.Random(0)
    for _ in range(50):
        z = random_policy(rng, rng.randint(2, 9), scale=2.0)
        got = entropy(T(z))
        assert got.dtype == F64 and got.shape == ()
        assert got.item() == pytest.approx(ref_entropy(z), abs=1e-12)
    # batched (P, A) -> (P,), and float32 / integer logits are accepted and computed in float64
    zs = [random_policy(rng, 5) for _ in range(4)]
    torch.testing.assert_close(entropy(T(zs)), T([ref_entropy(z) for z in zs]))
    assert entropy(torch.zeros(2, 3, 6)).shape == (2, 3)
    assert entropy(torch.tensor([0, 0, 0, 0])).item() == pytest.approx(math.log(4), abs=1e-12)


@given(st.lists(st.floats(-20, 20, allow_nan=False), min_size=2, max_size=10), st.floats(-50, 50))
def test_entropy_bounds_and_shift_invariance(z, c):
    h = entropy(T(z)).item()
    assert -1e-12 <= h <= math.log(len(z)) + 1e-12
    assert entropy(T(z) + c).item() == pytest.approx(h, abs=1e-9)


def test_entropy_changes_match_plain_python():
    rng = random.Random(1)
    for _ in range(40):
        n = rng.randint(2, 8)
        z, dz = random_policy(rng, n), [rng.gauss(0.0, 0.3) for _ in range(n)]
        zt, dzt = T(z), T(dz)
        assert entropy_change_exact(zt, dzt).item() == pytest.approx(py_exact(z, dz), abs=1e-12)
        assert entropy_change_first_order(zt, dzt).item() == pytest.approx(py_first_order(z, dz), abs=1e-12)


def test_first_order_change_hand_two_actions():
    # pi = (q, 1-q): Cov(x, y) = q (1-q) (x1 - x2)(y1 - y2), so dH ~= -q (1-q) log(q / (1-q)) (dz1 - dz2).
    # z = (log 3, 0): q = 3/4, dz = (1, 0) -> dH ~= -(3/16) log 3
    got = entropy_change_first_order(T([LOG3, 0.0]), T([1.0, 0.0])).item()
    assert got == pytest.approx(-3 / 16 * LOG3, abs=1e-12)
    # a step along the all-ones direction changes nothing (softmax is shift invariant)
    z = T([0.3, -1.0, 2.0])
    assert entropy_change_first_order(z, torch.ones(3)).abs().item() < 1e-15
    assert entropy_change_exact(z, 5 * torch.ones(3)).abs().item() < 1e-12


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_first_order_error_shrinks_as_eta_squared(seed):
    rng = random.Random(100 + seed)
    n = rng.randint(3, 7)
    z, d = random_policy(rng, n), [rng.gauss(0.0, 1.0) for _ in range(n)]
    etas = [1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4]
    err = first_order_errors(T(z), T(d), T(etas))
    assert err.shape == (len(etas),) and err.dtype == F64
    assert 1.9 < loglog_slope(etas, err) < 2.1
    # each error is |exact - first order| as the plain-Python formulas give it
    for eta, e in zip(etas, err.tolist()):
        dz = [eta * v for v in d]
        assert e == pytest.approx(abs(py_exact(z, dz) - py_first_order(z, dz)), abs=1e-12)


def test_loglog_slope_hand():
    assert loglog_slope([1.0, 2.0, 4.0, 8.0], [5.0, 40.0, 320.0, 2560.0]) == pytest.approx(3.0)  # y = 5 x^3
    assert loglog_slope([1e-3, 1e-2], [7.0, 7.0]) == pytest.approx(0.0)
    for x, y in (([1.0, 2.0], [1.0, -1.0]), ([1.0], [1.0]), ([1.0, 2.0, 3.0], [1.0, 2.0]), ([0.0, 1.0], [1.0, 2.0])):
        with pytest.raises(ValueError, match="x and y"):
            loglog_slope(x, y)
