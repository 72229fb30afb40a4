"""Tests for qae_lab.toys.bandit's step model (c) in expectation: the scale factors, the step's two moments, E[dH] to
second order and the RMS-normalised step.

The reference is written apart from the library: every ordered group of G responses of a small bandit (A^G of them,
each with its product of probabilities), the advantages from tests/testkit/reference.py's plain-Python loop, the exact
entropy change from the textbook formula. Where a Monte Carlo stands in, its tolerance comes from its own standard
error (fixed seed).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.reference import ref_advantages, ref_entropy

from qae_lab.toys.bandit import (
    entropy_change_first_order,
    expected_pg_step,
    make_bandits,
    mean_scale_factor,
    quantile_scale_factor,
    rms_normalised_step,
    sample_group_steps,
    sampled_entropy_change,
    sampled_step_moments,
    scale_factor,
)

F64 = torch.float64
OPTIONS = [("mean", "none"), ("mean", "group"), ("quantile", "none"), ("quantile", "group")]


def T(x) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


def every_group(z: list[float], r: list[float], g: int, baseline: str, scale: str, k: float = 0.4):
    """(probability, g_vector) of every ordered group of G responses: g = (1/G) sum_i A_i (e_{y_i} - pi), A_i from
    the plain-Python reference, the paper's quantile, eps 1e-6 (the library's default)."""
    m = max(z)
    e = [math.exp(v - m) for v in z]
    pi = [v / sum(e) for v in e]
    for ys in itertools.product(range(len(z)), repeat=g):
        prob = math.prod(pi[y] for y in ys)
        adv = ref_advantages([r[y] for y in ys], g, baseline, k, "paper", scale, 1e-6)
        vec = [sum(a * ((y == j) - pi[j]) for a, y in zip(adv, ys)) / g for j in range(len(z))]
        yield prob, vec


def exact_moments(z, r, g, baseline, scale):
    """E[g] (A,) and E[g g^T] (A, A) over every ordered group."""
    n = len(z)
    mean, second = [0.0] * n, [[0.0] * n for _ in range(n)]
    for prob, vec in every_group(z, r, g, baseline, scale):
        for i in range(n):
            mean[i] += prob * vec[i]
            for j in range(n):
                second[i][j] += prob * vec[i] * vec[j]
    return T(mean), T(second)


def exact_entropy_change(z, r, g, eta, baseline, scale) -> float:
    """E[H(softmax(z + eta g)) - H(softmax(z))] over every ordered group: no expansion in eta."""
    h0 = ref_entropy(z)
    return sum(
        prob * (ref_entropy([a + eta * b for a, b in zip(z, vec)]) - h0)
        for prob, vec in every_group(z, r, g, baseline, scale)
    )


Z3, R3 = [1.2, -0.3, 0.4], [0.0, 1.0, 0.0]  # p = pi(1), about 0.17: a hard prompt at K = 0.4
Z4, R4 = [0.5, -1.0, 1.5, 0.0], [1.0, 0.0, 1.0, 0.0]  # p about 0.77: an easy one


# ---------------------------------------------------------------- the scale factors


def test_scale_factors_by_hand():
    # G = 4, K = 0.4: b_K is the 2nd smallest reward, so b_K = 1 iff 3 or 4 of 4 succeed; the own reward moves it
    # only when the other 3 hold exactly 2 successes: c = P(S = 2) = 3 p^2 (1 - p)
    for p in (0.1, 0.5, 0.9):
        want = 1 - 3 * p**2 * (1 - p)
        assert quantile_scale_factor(p, 4, 0.4).item() == pytest.approx(want, abs=1e-15)
        assert scale_factor(p, 4, baseline="quantile", k=0.4, scale="none").item() == pytest.approx(want, abs=1e-15)
        assert scale_factor(p, 4, baseline="mean", scale="none").item() == pytest.approx(0.75, abs=1e-15)
    assert mean_scale_factor(4) == 0.75 and mean_scale_factor(2) == 0.5
    # with the std, G = 2: a mixed group {1, 0} has std sqrt(1/2); the mean's A = +-(1/2) / (sqrt(1/2) + eps), the
    # quantile's (K = 0.4: b_K = the smaller reward, 0) A = 1 / (sqrt(1/2) + eps) for the success, 0 for the failure.
    # h(1) = (1 - p) A(1, S = 0), h(0) = p A(0, S = 1)
    s = math.sqrt(0.5) + 1e-6
    for p in (0.2, 0.7):
        mean = (1 - p) * 0.5 / s + p * 0.5 / s
        quantile = (1 - p) * 1 / s - p * 0
        assert scale_factor(p, 2, baseline="mean").item() == pytest.approx(mean, rel=1e-12)
        assert scale_factor(p, 2, baseline="quantile", k=0.4).item() == pytest.approx(quantile, rel=1e-12)


def test_scale_factors_at_the_certain_ends():
    # p = 0: the others all fail, S = 0; p = 1: they all succeed, S = G - 1. Without the std, G = 8, K = 0.4:
    # mean A(1, 0) - A(0, 0) = 7/8 - 0 and A(1, 7) - A(0, 7) = 0 - (-7/8); QAE (b_K = 1 iff >= 5 of 8 succeed)
    # A(1, 0) - A(0, 0) = 1 - 0 and A(1, 7) - A(0, 7) = 0 - (-1)
    assert scale_factor(T([0.0, 1.0]), 8, baseline="mean", scale="none").tolist() == [0.875, 0.875]
    assert scale_factor(T([0.0, 1.0]), 8, baseline="quantile", scale="none").tolist() == [1.0, 1.0]


@settings(max_examples=40, deadline=None)
@given(p=st.floats(0.0, 1.0), g=st.integers(2, 12), k=st.sampled_from([0.2, 0.25, 0.4, 0.5, 0.6, 0.8]))
def test_closed_forms_agree_with_the_enumeration(p, g, k):
    # the enumeration goes through qae_lab.advantages.group_advantages; the closed forms through binomial algebra
    quantile = scale_factor(p, g, baseline="quantile", k=k, scale="none").item()
    assert quantile == pytest.approx(quantile_scale_factor(p, g, k).item(), abs=1e-12)
    assert scale_factor(p, g, baseline="mean", scale="none").item() == pytest.approx(mean_scale_factor(g), abs=1e-12)
    assert -1e-12 <= quantile <= 1 + 1e-12  # 1 - a probability, up to float64 rounding


@pytest.mark.parametrize("baseline,scale", OPTIONS)
def test_expected_sampled_step_is_the_exact_step_times_the_scale_factor(baseline, scale):
    # every ordered group of 4 from 3 responses (81): the expected step, with no sampling error
    mean, _ = exact_moments(Z3, R3, 4, baseline, scale)
    p = (torch.softmax(T(Z3), -1) * T(R3)).sum()
    c = scale_factor(p, 4, baseline=baseline, scale=scale)
    torch.testing.assert_close(mean, c * expected_pg_step(T(Z3), T(R3), 1.0), rtol=1e-12, atol=1e-14)


def test_the_scale_factor_against_a_monte_carlo_at_g8():
    # too many groups to list at G = 8: the library's sampler, 40,000 groups, 5 standard errors per logit
    z, r = make_bandits(T([0.15]), 6, 1.5, torch.Generator().manual_seed(5))
    z, r = z[0], r[0]
    for baseline in ("mean", "quantile"):
        dz, _ = sample_group_steps(z, r, 8, 40_000, baseline=baseline, generator=torch.Generator().manual_seed(6))
        mean, stderr = dz.mean(0), dz.std(0) / math.sqrt(dz.shape[0])  # (A,)
        want = scale_factor(0.15, 8, baseline=baseline) * expected_pg_step(z, r, 1.0)
        assert ((mean - want).abs() <= 5 * stderr).all(), (baseline, mean, want, stderr)


def test_the_scale_factor_is_larger_for_qae_away_from_the_boundary():
    # G = 8, K = 0.4, with the std: QAE's factor above the mean's on clearly hard and easy prompts, below near 1 - K
    p = T([0.1, 0.2, 0.5, 0.85, 0.9])
    mean, quantile = scale_factor(p, 8, baseline="mean"), scale_factor(p, 8, baseline="quantile")
    assert (quantile > mean).tolist() == [True, True, False, True, True]


# ---------------------------------------------------------------- the second moment and E[dH]


@pytest.mark.parametrize("baseline,scale", OPTIONS)
@pytest.mark.parametrize("z,r", [(Z3, R3), (Z4, R4)])
def test_step_moments_match_every_group(z, r, baseline, scale):
    g = 4 if len(z) == 3 else 3  # 81 and 64 ordered groups
    want_mean, want_second = exact_moments(z, r, g, baseline, scale)
    mom = sampled_step_moments(T(z), T(r), g, baseline=baseline, scale=scale)
    torch.testing.assert_close(mom.mean, want_mean, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(mom.second, want_second, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("baseline,scale", OPTIONS)
def test_sampled_entropy_change_matches_every_group_to_third_order(baseline, scale):
    # the exact E[dH] over every group, against first + second order: the rest is O(eta^3), so it shrinks 8-fold
    # when eta halves; at eta = 0.01 it is below 1e-5 of the change
    misses = []
    for eta in (0.2, 0.1, 0.01):
        exact = exact_entropy_change(Z3, R3, 4, eta, baseline, scale)
        out = sampled_entropy_change(T(Z3), T(R3), 4, eta, baseline=baseline, scale=scale)
        assert out["total"] == pytest.approx(out["first"] + out["second"], abs=1e-18)
        misses.append(abs(exact - out["total"]))
        if eta == 0.01:
            assert misses[-1] < 1e-5 * abs(exact)
    assert misses[1] < misses[0] / 6  # O(eta^3): a factor 8 per halving, allowing for the O(eta^4) rest
    # and the first order alone misses by O(eta^2)
    out = sampled_entropy_change(T(Z3), T(R3), 4, 0.2, baseline=baseline, scale=scale)
    assert abs(exact_entropy_change(Z3, R3, 4, 0.2, baseline, scale) - out["first"]) > misses[0]


def test_the_first_order_term_is_the_scale_factor_times_step_b():
    z, r = make_bandits(T([0.8]), 8, 1.5, torch.Generator().manual_seed(2))
    z, r = z[0], r[0]
    b = entropy_change_first_order(z, expected_pg_step(z, r, 0.05)).item()
    for baseline, scale in OPTIONS:
        out = sampled_entropy_change(z, r, 8, 0.05, baseline=baseline, scale=scale)
        assert out["first"] == pytest.approx(out["scale"] * b, rel=1e-10)
        assert out["scale"] == pytest.approx(scale_factor(0.8, 8, baseline=baseline, scale=scale).item(), rel=1e-10)


@pytest.mark.parametrize("baseline,scale", OPTIONS)
def test_the_noise_term_is_the_covariance_part(baseline, scale):
    # noise = eta^2/2 tr(hess H Cov(g)): zero for a step with no spread, here checked by its definition on the list
    mean, second = exact_moments(Z4, R4, 3, baseline, scale)
    cov = second - torch.outer(mean, mean)
    out = sampled_entropy_change(T(Z4), T(R4), 3, 0.3, baseline=baseline, scale=scale)
    z = T(Z4)
    hess = torch.autograd.functional.hessian(lambda x: -(x.softmax(-1) * x.log_softmax(-1)).sum(), z)
    assert out["noise"] == pytest.approx(0.3**2 / 2 * float((hess * cov).sum()), rel=1e-9, abs=1e-15)


# ---------------------------------------------------------------- the RMS-normalised step


@pytest.mark.parametrize("baseline,scale", OPTIONS)
def test_rms_normalised_step_against_every_group(baseline, scale):
    mean, second = exact_moments(Z4, R4, 3, baseline, scale)
    want = 0.5 * mean / second.diagonal().sqrt()
    got = rms_normalised_step(T(Z4), T(R4), 3, 0.5, baseline=baseline, scale=scale)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-13)


def test_rms_normalised_step_moves_qaes_zero_advantage_side_together():
    # a hard prompt: with QAE the wrong responses' gradient is -pi_a sum_i A_i / G, one random factor times pi_a,
    # which a per-logit RMS divides out; under the mean baseline the step of a wrong response grows with pi_a
    z, r = make_bandits(T([0.1]), 12, 1.5, torch.Generator().manual_seed(0))
    z, r = z[0], r[0]
    wrong = r == 0
    pi = torch.softmax(z, -1)
    held = wrong & (pi > 0.01)  # the wrong responses that hold the mass (a rarer one also feels the rare b_K = 1)
    for scale in ("none", "group"):
        quantile = rms_normalised_step(z, r, 8, 1.0, baseline="quantile", scale=scale)
        mean = rms_normalised_step(z, r, 8, 1.0, baseline="mean", scale=scale)
        assert (quantile[held].max() - quantile[held].min()) / quantile[held].abs().mean() < 0.05
        assert (mean[held].max() - mean[held].min()) / mean[held].abs().mean() > 0.5
        assert torch.equal(mean[wrong].argsort(descending=True), pi[wrong].argsort())  # the likelier, the further down


def test_bad_input():
    with pytest.raises(ValueError, match="^scale "):
        scale_factor(0.3, 8, scale="batch")
    with pytest.raises(ValueError, match="^p "):
        scale_factor(1.2, 8)
    with pytest.raises(ValueError, match="group_size"):
        quantile_scale_factor(0.3, 1, 0.4)
    with pytest.raises(ValueError, match="^k "):
        quantile_scale_factor(0.3, 8, 1.0)
    with pytest.raises(ValueError, match="binary"):
        sampled_step_moments(T([0.0, 1.0]), T([0.5, 1.0]), 4)
    with pytest.raises(ValueError, match="binary"):
        sampled_step_moments(torch.zeros(2, 3), torch.zeros(2, 3), 4)
    with pytest.raises(ValueError, match="eta"):
        rms_normalised_step(T(Z3), T(R3), 4, 0.0)
