"""Tests for qae_lab.toys.bandit's population quantile b_K and QAE's Prop. 4.2 (two-sided entropy safety) on the
toy softmax bandit."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from qae_lab.toys.bandit import check_proposition_42, identity_entropy_change, make_bandits, population_quantile
from theory_setup import F64, T, py_mean_reward, py_population_quantile, py_softmax, random_policy


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


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=6), st.floats(0.01, 0.99))
def test_population_quantile_is_a_reward_and_monotone_in_k(z, k):
    r = T([float(i % 3) for i in range(len(z))])
    b = population_quantile(T(z), r, k).item()
    assert b in r.tolist()
    assert population_quantile(T(z), r, min(0.99, k + 0.1)).item() >= b
