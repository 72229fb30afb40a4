"""Tests for qae_lab.theory: the toy softmax bandit behind QAE's two-sided entropy safety.

Plain-Python references (the ``math`` module, loops over actions) stand in for the
vectorised code; hand-derived two-action cases pin the formulas. Step model (c), the
sampled groups, is tested in ``test_simulation.py``.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import ref_entropy

from qae_lab.sparsity import expected_zero_fraction, expected_zero_fraction_beta, gate_zero_counts
from qae_lab.theory import (
    check_proposition_42,
    entropy,
    entropy_change_exact,
    entropy_change_first_order,
    expected_pg_step,
    first_order_errors,
    identity_entropy_change,
    identity_step,
    knob_slope,
    loglog_slope,
    make_bandits,
    population_quantile,
)

F64 = torch.float64


def T(x, dtype=F64) -> torch.Tensor:
    """A float64 tensor: the library computes in float64, and float32 inputs would round the hand values."""
    return torch.tensor(x, dtype=dtype)

LOG3 = math.log(3.0)


# ---------------------------------------------------------------- plain-Python references

def py_softmax(z: list[float]) -> list[float]:
    m = max(z)
    e = [math.exp(v - m) for v in z]
    s = sum(e)
    return [v / s for v in e]


def py_cov(pi: list[float], x: list[float], y: list[float]) -> float:
    """Cov_{a~pi}(x_a, y_a), by the textbook formula."""
    ex = sum(p * a for p, a in zip(pi, x))
    ey = sum(p * b for p, b in zip(pi, y))
    return sum(p * (a - ex) * (b - ey) for p, a, b in zip(pi, x, y))


def py_first_order(z: list[float], dz: list[float]) -> float:
    """dH ~= -Cov_pi(log pi, dz)."""
    pi = py_softmax(z)
    return -py_cov(pi, [math.log(p) for p in pi], dz)


def py_exact(z: list[float], dz: list[float]) -> float:
    return ref_entropy([a + b for a, b in zip(z, dz)]) - ref_entropy(z)


def py_mean_reward(z: list[float], r: list[float]) -> float:
    return sum(p * x for p, x in zip(py_softmax(z), r))


def py_population_quantile(pi: list[float], r: list[float], k: float) -> float:
    """inf{x : P_pi(r <= x) >= K}: walk the rewards in increasing order, adding their pi mass."""
    cum = 0.0
    for x, p in sorted(zip(r, pi)):
        cum += p
        if cum >= k:
            return x
    return max(r)  # only reached if rounding leaves the total mass a hair below K


def random_policy(rng: random.Random, n_actions: int, scale: float = 1.5) -> list[float]:
    return [rng.gauss(0.0, scale) for _ in range(n_actions)]


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


# ---------------------------------------------------------------- population quantile

def test_population_quantile_binary_is_the_two_regime_gate():
    rng = random.Random(6)
    n_checked = 0
    for _ in range(300):
        n = rng.randint(2, 8)
        z = random_policy(rng, n, scale=rng.choice([0.5, 2.0]))
        r = [float(rng.random() < 0.5) for _ in range(n)]
        k = rng.choice([0.2, 0.4, 0.6, 0.8, rng.uniform(0.01, 0.99)])
        p = py_mean_reward(z, r)
        if abs(p - (1 - k)) < 1e-9:
            continue  # the boundary is tested on its own below
        got = population_quantile(T(z), T(r), k).item()
        assert got == py_population_quantile(py_softmax(z), r, k)
        assert got == (0.0 if p <= 1 - k else 1.0)
        n_checked += 1
    assert n_checked > 280


def test_population_quantile_non_binary_matches_loop():
    rng = random.Random(7)
    for _ in range(100):
        n = rng.randint(2, 8)
        z, r = random_policy(rng, n), [round(rng.gauss(0, 1), 1) for _ in range(n)]  # ties happen
        k = rng.uniform(0.01, 0.99)
        assert population_quantile(T(z), T(r), k).item() == py_population_quantile(py_softmax(z), r, k)


def test_population_quantile_hand():
    # uniform pi over r = (0.3, 0.1, 0.9, 0.5): sorted 0.1 0.3 0.5 0.9, CDF 1/4 1/2 3/4 1
    z, r = torch.zeros(4), T([0.3, 0.1, 0.9, 0.5])
    got = [population_quantile(z, r, k).item() for k in (0.2, 0.4, 0.5, 0.6, 0.9)]
    assert got == pytest.approx([0.1, 0.3, 0.3, 0.5, 0.9])  # K = 0.5: F(0.3) = 1/2 >= K already
    # pi = (0.1, 0.2, 0.3, 0.4), r = (3, 1, 2, 0): sorted by r the masses are 0.4 0.2 0.3 0.1, CDF .4 .6 .9 1
    z, r = torch.log(T([0.1, 0.2, 0.3, 0.4])), T([3.0, 1.0, 2.0, 0.0])
    got = [population_quantile(z, r, k).item() for k in (0.3, 0.4, 0.5, 0.61, 0.95)]
    assert got == [0.0, 0.0, 1.0, 2.0, 3.0]
    # batched: (P, A) -> (P,)
    zz = torch.stack([torch.zeros(4, dtype=F64), torch.log(T([0.1, 0.2, 0.3, 0.4]))])
    rr = T([[0.3, 0.1, 0.9, 0.5], [3.0, 1.0, 2.0, 0.0]])
    assert population_quantile(zz, rr, 0.5).tolist() == pytest.approx([0.3, 1.0])


def test_population_quantile_boundary_p_equals_one_minus_k():
    # uniform over 5 actions, 3 correct: p = 0.6, F(0) = 0.4. The infimum includes equality: b_0.4 = 0.
    z, r = torch.zeros(5), T([1.0, 1.0, 1.0, 0.0, 0.0])
    assert population_quantile(z, r, 0.4).item() == 0.0
    assert population_quantile(z, r, 0.41).item() == 1.0
    assert population_quantile(z, r, 0.39).item() == 0.0


# ---------------------------------------------------------------- Prop. 4.2

def test_proposition_42_holds_on_a_grid_of_policies():
    gen = torch.Generator().manual_seed(8)
    p = 0.005 + 0.99 * torch.rand(200, generator=gen, dtype=F64)  # spread over (0, 1)
    z, r = make_bandits(p, 6, 1.0, gen)
    regimes = {"hard": 0, "easy": 0}
    for i in range(200):
        for k in (0.2, 0.4, 0.6, 0.8):
            out = check_proposition_42(z[i], r[i], k, 1e-3)
            assert out["p"] == pytest.approx(p[i].item(), abs=1e-12)
            hard = p[i].item() <= 1 - k
            assert out["regime"] == ("hard" if hard else "easy")
            assert out["b_k"] == (0.0 if hard else 1.0)
            assert out["slope"] > 0  # the bandits are not uniform
            assert out["holds_first_order"] is True
            assert out["holds_exact"] is True  # eta = 1e-3: the O(eta^2) terms cannot flip the order
            regimes[out["regime"]] += 1
    assert min(regimes.values()) > 200  # both regimes are well represented


def test_proposition_42_is_strict_away_from_b_k():
    # dH(b) - dH(b_K) = (b - b_K) * slope: strictly > 0 in the hard regime for b > 0, < 0 in the easy one for b < 1
    z, r = make_bandits(T([0.2, 0.9]), 6, 1.0, torch.Generator().manual_seed(9))
    b = torch.linspace(0.05, 0.95, 19, dtype=F64)
    for i, k in ((0, 0.4), (1, 0.4)):
        b_k = population_quantile(z[i], r[i], k)
        d = identity_entropy_change(z[i], r[i], b, 1e-2)
        d_k = identity_entropy_change(z[i], r[i], b_k, 1e-2)
        sign = 1.0 if b_k.item() == 0.0 else -1.0
        assert (sign * (d - d_k) > 0).all()
    assert population_quantile(z[0], r[0], 0.4).item() == 0.0 and population_quantile(z[1], r[1], 0.4).item() == 1.0


def test_proposition_42_boundary_is_hard():
    # p = 1 - K: hard regime and b_K = 0 (F(0) = K meets the infimum), although rounding may put p a hair off 0.6.
    # Uniform over 5 actions with 3 correct: E_pi r = 0.2 + 0.2 + 0.2 = 0.6000000000000001 in floating point.
    z, r = torch.zeros(5), T([1.0, 1.0, 1.0, 0.0, 0.0])
    out = check_proposition_42(z, r, 0.4, 1e-3)
    assert out["p"] == pytest.approx(0.6, abs=1e-12)
    assert out["regime"] == "hard" and out["b_k"] == 0.0
    for seed in range(5):
        zb, rb = make_bandits(T([0.6]), 6, 1.0, torch.Generator().manual_seed(seed))
        out = check_proposition_42(zb[0], rb[0], 0.4, 1e-3)
        assert out["regime"] == "hard" and out["b_k"] == 0.0
        assert out["holds_first_order"] and out["holds_exact"]


def test_proposition_42_rejects_bad_input():
    z = T([1.0, 0.0, -1.0])
    with pytest.raises(ValueError, match="binary"):
        check_proposition_42(z, T([1.0, 0.5, 0.0]), 0.4, 1e-3)
    with pytest.raises(ValueError, match="z"):
        check_proposition_42(torch.stack([z, z]), T([[1.0, 0, 0], [1.0, 0, 0]]), 0.4, 1e-3)
    with pytest.raises(ValueError, match="k"):
        check_proposition_42(z, T([1.0, 0, 0]), 1.0, 1e-3)
    with pytest.raises(ValueError, match="eta"):
        check_proposition_42(z, T([1.0, 0, 0]), 0.4, 0.0)


def test_proposition_42_rejects_bad_n_b():
    # n_b = 0 would compare b_K with no baseline at all and report the proposition as holding
    for n_b in (0, -1, 2.5):
        with pytest.raises(ValueError, match="n_b"):
            check_proposition_42(T([1.0, 0.0, -1.0]), T([1.0, 0, 0]), 0.4, 1e-3, n_b=n_b)


# ---------------------------------------------------------------- make_bandits

@pytest.mark.parametrize("n_actions", [2, 3, 7, 16])
@pytest.mark.parametrize("sharpness", [0.0, 1.0, 3.0])
def test_make_bandits_exact_success_rates(n_actions, sharpness):
    gen = torch.Generator().manual_seed(11)
    p = 0.001 + 0.998 * torch.rand(40, generator=gen, dtype=F64)
    z, r = make_bandits(p, n_actions, sharpness, gen)
    assert z.shape == r.shape == (40, n_actions) and z.dtype == F64
    pi = torch.softmax(z, -1)
    assert ((pi * r).sum(-1) - p).abs().max().item() < 1e-12
    assert set(r.unique().tolist()) <= {0.0, 1.0}
    assert (r.sum(-1) == max(1, n_actions // 2)).all()  # half correct, at least one ...
    assert (r.sum(-1) < n_actions).all()  # ... and at least one wrong
    if sharpness == 0.0:  # uniform within each class
        for i in range(40):
            for cls in (0.0, 1.0):
                v = pi[i][r[i] == cls]
                assert (v - v[0]).abs().max().item() < 1e-14
    z2, r2 = make_bandits(p, n_actions, sharpness, torch.Generator().manual_seed(5))
    z3, r3 = make_bandits(p, n_actions, sharpness, torch.Generator().manual_seed(5))
    assert torch.equal(z2, z3) and torch.equal(r2, r3)


@pytest.mark.parametrize("kwargs,name", [
    ({"p": T([0.0])}, "p"), ({"p": T([1.0])}, "p"), ({"p": T([0.5, float("nan")])}, "p"), ({"p": T([-0.2])}, "p"),
    ({"n_actions": 1}, "n_actions"), ({"n_actions": 0}, "n_actions"), ({"n_actions": 4.0}, "n_actions"),
    ({"n_actions": True}, "n_actions"), ({"sharpness": -0.1}, "sharpness"), ({"sharpness": float("inf")}, "sharpness"),
])
def test_make_bandits_bad_input(kwargs, name):
    args = {"p": T([0.5]), "n_actions": 4, "sharpness": 1.0} | kwargs
    with pytest.raises(ValueError, match=rf"^{name} "):
        make_bandits(**args)


# ---------------------------------------------------------------- Python numbers are taken at full precision

def test_python_numbers_keep_float64_precision():
    # The maths runs in float64; a Python float or list must mean the same as a float64 tensor of it, not its
    # float32 rounding (0.1 -> 0.10000000149...), which would break "E_pi[r] = p exactly" by ~1e-9.
    z, r = T([1.0, 0.0, -1.0]), T([1.0, 0.0, 0.0])
    torch.testing.assert_close(identity_step(z, r, 0.1, 1.0), identity_step(z, r, T(0.1), 1.0), rtol=1e-15, atol=0)
    torch.testing.assert_close(identity_entropy_change(z, r, [0.1, 0.3], 1.0),
                               identity_entropy_change(z, r, T([0.1, 0.3]), 1.0), rtol=1e-15, atol=0)
    zb, rb = make_bandits([0.1, 0.3, 0.7], 6, 1.0, torch.Generator().manual_seed(0))
    assert ((torch.softmax(zb, -1) * rb).sum(-1) - T([0.1, 0.3, 0.7])).abs().max().item() < 1e-12
    assert expected_zero_fraction(0.1, 8, 0.4).item() == pytest.approx(expected_zero_fraction(T(0.1), 8, 0.4).item(),
                                                                     rel=1e-14)
    torch.testing.assert_close(first_order_errors(z, r, [0.1, 0.01]), first_order_errors(z, r, T([0.1, 0.01])),
                               rtol=1e-12, atol=0)


# ---------------------------------------------------------------- bad input, generally

GOOD_Z, GOOD_R = T([1.0, 0.0, -1.0]), T([1.0, 0.0, 0.0])


def _calls_with(z=GOOD_Z, r=GOOD_R, eta=0.5, k=0.4) -> dict:
    """One call of every function taking z and r, by name, with the given argument and the others good."""
    return {
        "identity_step": lambda: identity_step(z, r, 0.5, eta),
        "expected_pg_step": lambda: expected_pg_step(z, r, eta),
        "identity_entropy_change": lambda: identity_entropy_change(z, r, T([0.0, 1.0]), eta),
        "population_quantile": lambda: population_quantile(z, r, k),
        "check_proposition_42": lambda: check_proposition_42(z, r, k, eta),
    }


@pytest.mark.parametrize("z", [T([1.0]), T(1.0), torch.zeros(3, 1), T([1.0, float("nan"), 0.0])])
def test_bad_z(z):
    for call in [*_calls_with(z=z).values(), lambda: entropy(z), lambda: knob_slope(z, 1.0),
                 lambda: entropy_change_exact(z, torch.zeros_like(z)),
                 lambda: entropy_change_first_order(z, torch.zeros_like(z)),
                 lambda: first_order_errors(z, torch.ones_like(z), [0.1])]:
        with pytest.raises(ValueError, match=r"^z "):
            call()


@pytest.mark.parametrize("r", [T([1.0, 0.0]), T([1.0, 0.0, 0.0, 1.0]), T([1.0, float("inf"), 0.0])])
def test_bad_r(r):
    for call in _calls_with(r=r).values():
        with pytest.raises(ValueError, match=r"^r "):
            call()


@pytest.mark.parametrize("eta", [0.0, -0.1, float("nan"), float("inf"), "0.1", None])
def test_bad_eta(eta):
    takes_eta = [c for name, c in _calls_with(eta=eta).items() if name != "population_quantile"]
    for call in takes_eta + [lambda: knob_slope(GOOD_Z, eta)]:
        with pytest.raises(ValueError, match="eta"):
            call()
    with pytest.raises(ValueError, match="etas"):
        first_order_errors(GOOD_Z, GOOD_Z, [1e-2, eta if isinstance(eta, float) else -1.0])


@pytest.mark.parametrize("k", [0.0, 1.0, -0.2, 1.3, float("nan"), True, "0.4"])
def test_bad_k(k):
    calls = _calls_with(k=k)
    for call in [calls["population_quantile"], calls["check_proposition_42"],
                 lambda: gate_zero_counts(4, k), lambda: expected_zero_fraction(0.5, 4, k),
                 lambda: expected_zero_fraction_beta(1.0, 1.0, 4, k)]:
        with pytest.raises(ValueError, match=r"^k "):
            call()


def test_mismatched_step_shapes_are_value_errors():
    # like r, a step dz (or a direction) must have one entry per action
    with pytest.raises(ValueError, match="dz"):
        entropy_change_exact(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="dz"):
        entropy_change_first_order(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="direction"):
        first_order_errors(torch.zeros(3), torch.ones(4), [0.1])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=6), st.floats(0.01, 0.99))
def test_population_quantile_is_a_reward_and_monotone_in_k(z, k):
    r = T([float(i % 3) for i in range(len(z))])
    b = population_quantile(T(z), r, k).item()
    assert b in r.tolist()
    assert population_quantile(T(z), r, min(0.99, k + 0.1)).item() >= b
