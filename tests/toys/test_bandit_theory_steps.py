"""Tests for qae_lab.toys.bandit's linear knob dH(b) and its two exact step models: (a) the identity's step
dz = eta pi (r - b), (b) the exact expected policy gradient. Step model (c), the sampled groups, is tested in
``test_bandit_simulation.py``."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from qae_lab.toys.bandit import (
    baseline_pg_step,
    entropy,
    entropy_after_step,
    expected_pg_step,
    identity_entropy_change,
    identity_step,
    knob_slope,
)
from theory_setup import F64, LOG3, T, py_cov, py_mean_reward, py_softmax, random_policy


# ---------------------------------------------------------------- the linear knob


@pytest.mark.parametrize("binary", [True, False])
def test_knob_is_affine_in_b_with_knob_slope(binary):
    rng = random.Random(2 + binary)
    b = torch.linspace(-0.5, 1.5, 21, dtype=F64)  # a grid wider than [0, 1]: the identity is affine in b anyway
    for _ in range(30):
        n = rng.randint(2, 8)
        z = random_policy(rng, n)
        r = [float(rng.random() < 0.5) if binary else rng.uniform(-1.0, 2.0) for _ in range(n)]
        eta = rng.choice([1e-3, 0.1, 1.0])
        d = identity_entropy_change(T(z), T(r), b, eta)  # (21,)
        slope = knob_slope(T(z), eta)
        assert d.shape == b.shape and slope.shape == ()
        # equal steps in b, equal steps in dH: the slope is exactly eta Cov(log pi, pi)
        torch.testing.assert_close(d[1:] - d[:-1], slope * (b[1:] - b[:-1]), rtol=1e-9, atol=1e-15)
        pi = py_softmax(z)
        log_pi = [math.log(p) for p in pi]
        assert slope.item() == pytest.approx(eta * py_cov(pi, log_pi, pi), rel=1e-9, abs=1e-15)
        assert slope.item() > 0  # a random policy is not uniform
        for bi, di in zip(b.tolist(), d.tolist()):
            want = -py_cov(pi, log_pi, [eta * p * (x - bi) for p, x in zip(pi, r)])
            assert di == pytest.approx(want, rel=1e-9, abs=1e-15)
    # a scalar b gives a 0-d result
    assert identity_entropy_change(T([1.0, 0.0]), T([1.0, 0.0]), 0.5, 1.0).shape == ()


@pytest.mark.parametrize("n_actions", [2, 3, 5, 8])
@pytest.mark.parametrize("c", [-3.0, 0.0, 2.5])
def test_knob_is_flat_for_a_uniform_policy(n_actions, c):
    z = torch.full((n_actions,), c)
    assert knob_slope(z, 1.0).abs().item() < 1e-12
    r = torch.arange(n_actions, dtype=F64) % 2
    d = identity_entropy_change(z, r, torch.linspace(0, 1, 11, dtype=F64), 1.0)
    assert (d - d[0]).abs().max().item() < 1e-12


def test_knob_hand_two_actions():
    # z = (log 3, 0): pi = (3/4, 1/4); r = (1, 0), so p = E_pi r = 3/4.
    # Two-point covariance: Cov(x, y) = q (1-q) (x1 - x2)(y1 - y2) with q = 3/4, q (1-q) = 3/16.
    #   slope = eta Cov(log pi, pi) = eta (3/16) log 3 (3/4 - 1/4) = eta 3 log 3 / 32.
    #   dz = eta pi (r - b) = eta (3/4 (1 - b), -b/4), so dz1 - dz2 = eta (3/4 - b/2) and
    #   dH(b) = -eta (3/16) log 3 (3/4 - b/2) = -eta 9 log 3 / 64 + b eta 3 log 3 / 32.
    z, r = T([LOG3, 0.0]), T([1.0, 0.0])
    for eta in (0.01, 1.0):
        assert knob_slope(z, eta).item() == pytest.approx(eta * 3 * LOG3 / 32, rel=1e-12)
        d = identity_entropy_change(z, r, T([0.0, 0.75, 1.0]), eta)
        want = [-eta * 9 * LOG3 / 64, -eta * 9 * LOG3 / 128, -eta * 3 * LOG3 / 64]
        torch.testing.assert_close(d, T(want), rtol=1e-12, atol=0)
    # the general two-action slope: eta q (1-q) (2q - 1) log(q / (1-q)) > 0 unless q = 1/2
    for q in (0.05, 0.3, 0.5, 0.7, 0.99):
        want = q * (1 - q) * (2 * q - 1) * math.log(q / (1 - q))
        assert knob_slope(T([math.log(q), math.log(1 - q)]), 1.0).item() == pytest.approx(want, abs=1e-15)


@given(st.lists(st.floats(-10, 10, allow_nan=False), min_size=2, max_size=12))
def test_knob_slope_never_negative(z):
    # Chebyshev's sum inequality: log pi and pi are both increasing in pi, so their covariance is >= 0
    assert knob_slope(T(z), 1.0).item() >= -1e-15


# ---------------------------------------------------------------- step models (a) and (b)


def test_identity_step_hand():
    # z = (log 3, 0): pi = (3/4, 1/4); r = (1, 0), b = 1/2, eta = 2: dz = 2 (3/4 * 1/2, 1/4 * -1/2)
    got = identity_step(T([LOG3, 0.0]), T([1.0, 0.0]), 0.5, 2.0)
    assert got.dtype == F64
    torch.testing.assert_close(got, T([0.75, -0.25]))
    # several baselines at once: (M,) b with one (A,) policy -> (M, A)
    got = identity_step(T([LOG3, 0.0]), T([1.0, 0.0]), T([0.0, 1.0]), 1.0)
    torch.testing.assert_close(got, T([[0.75, 0.0], [0.0, -0.25]]))


def test_expected_pg_step_hand():
    # z = (log 3, 0), r = (1, 0): E_pi r = 3/4, dz = 2 (3/4 * 1/4, 1/4 * -3/4)
    torch.testing.assert_close(expected_pg_step(T([LOG3, 0.0]), T([1.0, 0.0]), 2.0), T([0.375, -0.375]))
    # pi = (1, 2, 5)/8, r = (2, 0, 1): E_pi r = 7/8, dz = pi (r - 7/8) = (9, -14, 5)/64
    z = torch.log(T([1.0, 2.0, 5.0]))
    torch.testing.assert_close(expected_pg_step(z, T([2.0, 0.0, 1.0]), 1.0), T([9.0, -14.0, 5.0]) / 64)


def test_expected_pg_step_is_identity_step_at_the_mean():
    rng = random.Random(4)
    zs, rs = [], []
    for _ in range(20):
        z, r = random_policy(rng, 6), [rng.uniform(0, 1) for _ in range(6)]
        zs.append(z)
        rs.append(r)
        want = expected_pg_step(T(z), T(r), 0.3)
        at_mean = identity_step(T(z), T(r), T(py_mean_reward(z, r)), 0.3)
        torch.testing.assert_close(at_mean, want, rtol=1e-12, atol=1e-15)
        assert want.sum().abs().item() < 1e-14  # the exact gradient of a softmax sums to 0 over actions
    # batched policies (P, A) with one baseline per policy (P,)
    p = T([py_mean_reward(z, r) for z, r in zip(zs, rs)])
    torch.testing.assert_close(identity_step(T(zs), T(rs), p, 0.3), expected_pg_step(T(zs), T(rs), 0.3))


def test_constant_baseline_cancels_in_the_exact_expected_gradient():
    rng = random.Random(5)
    for _ in range(10):
        n = rng.randint(2, 7)
        z, r = random_policy(rng, n), [float(rng.random() < 0.5) for _ in range(n)]
        pi = py_softmax(z)
        eta = 0.7
        want = expected_pg_step(T(z), T(r), eta)
        for b in (-1.0, 0.0, 0.3, 1.0, 5.0):
            # E_{y~pi}[grad_z log pi(y) (r(y) - b)], grad_z log pi(y) = e_y - pi, by a loop over actions
            g = [0.0] * n
            for y in range(n):
                for a in range(n):
                    g[a] += pi[y] * ((a == y) - pi[a]) * (r[y] - b)
            torch.testing.assert_close(want, eta * T(g), rtol=1e-10, atol=1e-14)
        # ... whereas the identity's step model does depend on b (unless b = E_pi r)
        if 0 < sum(r) < n:
            assert not torch.allclose(identity_step(T(z), T(r), 0.0, eta), want)


def test_baseline_pg_step_is_the_expected_step_whatever_the_baseline():
    rng = random.Random(6)
    for _ in range(10):
        n = rng.randint(2, 7)
        z, r = random_policy(rng, n), [float(rng.random() < 0.5) for _ in range(n)]
        pi = py_softmax(z)
        for b in (-1.0, 0.0, 0.3, 1.0, 5.0):
            # eta E_{y~pi}[(r(y) - b) (e_y - pi)], by a loop over actions
            g = [sum(pi[y] * (r[y] - b) * ((a == y) - pi[a]) for y in range(n)) for a in range(n)]
            got = baseline_pg_step(T(z), T(r), b, 0.7)
            torch.testing.assert_close(got, 0.7 * T(g), rtol=1e-10, atol=1e-14)
            torch.testing.assert_close(got, expected_pg_step(T(z), T(r), 0.7), rtol=1e-10, atol=1e-14)
    # batched: (P, A) policies, one baseline per policy
    zs = T([[0.0, 1.0, -1.0], [2.0, 0.0, 0.0]])
    rs = T([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    torch.testing.assert_close(baseline_pg_step(zs, rs, T([0.0, 1.0]), 1.0), expected_pg_step(zs, rs, 1.0))


def test_entropy_after_step_under_each_step_model():
    rng = random.Random(7)
    for _ in range(10):
        n = rng.randint(2, 7)
        z, r = T(random_policy(rng, n)), T([float(i % 2) for i in range(n)])
        for b in (0.0, 1.0):
            for model, step in (("identity", identity_step(z, r, b, 0.5)), ("expected", expected_pg_step(z, r, 0.5))):
                torch.testing.assert_close(entropy_after_step(z, r, b, 0.5, model=model), entropy(z + step))
        # (b): b = 0 and b = 1 leave the same entropy (float64 rounding apart); (a): b = 1 leaves more (the knob)
        e0, e1 = (entropy_after_step(z, r, b, 0.5, model="expected").item() for b in (0.0, 1.0))
        assert abs(e1 - e0) < 1e-12
        a0, a1 = (entropy_after_step(z, r, b, 0.5, model="identity").item() for b in (0.0, 1.0))
        assert a1 > a0
    with pytest.raises(ValueError, match="model must be one of"):
        entropy_after_step(T([0.0, 1.0]), T([1.0, 0.0]), 0.0, 0.5, model="sampled")
    with pytest.raises(ValueError, match="eta"):
        entropy_after_step(T([0.0, 1.0]), T([1.0, 0.0]), 0.0, -0.5, model="expected")
