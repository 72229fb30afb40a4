"""qae_lab.toys.bandit.knob_curve, notebook 02's knob figure as numbers: the linear knob of one bandit, b_K and the
regime, against a two-action bandit worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from qae_lab.toys.bandit import knob_curve


def test_knob_curve_of_a_two_action_bandit_by_hand():
    # sharpness 0 and two actions: pi = (p, 1 - p) on (correct, wrong), whatever the draw
    p, eta = 0.25, 0.5
    c = knob_curve(p, 0.4, eta, 0.0, n_actions=2, n_baselines=5)
    pi = (p, 1 - p)
    e_lp = sum(q * math.log(q) for q in pi)
    slope = eta * (sum(q * math.log(q) * q for q in pi) - e_lp * sum(q * q for q in pi))  # eta Cov(log pi, pi)
    assert c.slope == pytest.approx(slope, rel=1e-12)
    assert c.b.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    # dH(b) = -Cov(log pi, eta pi (r - b)), r = 1 on the correct action (probability p)
    for b, dh in zip(c.b.tolist(), c.dh.tolist()):
        x = (eta * p * (1 - b), eta * (1 - p) * (0 - b))
        want = -(sum(q * math.log(q) * xi for q, xi in zip(pi, x)) - e_lp * sum(q * xi for q, xi in zip(pi, x)))
        assert dh == pytest.approx(want, rel=1e-10, abs=1e-15)
    assert c.b_k == 0.0 and c.hard  # p = 0.25 <= 1 - K: the K-quantile of the reward is 0


@pytest.mark.parametrize(
    "p, k, hard", [(0.3, 0.4, True), (0.6, 0.4, True), (0.61, 0.4, False), (0.7, 0.2, True), (0.5, 0.8, False)]
)
def test_knob_curve_regime_and_b_k(p, k, hard):
    c = knob_curve(p, k, 0.5, 1.5)
    assert c.hard is hard and c.b_k == (0.0 if hard else 1.0)
    assert len(c.b) == len(c.dh) == 51 and c.dh.dtype == torch.float64
    # the knob is affine in b with the knob's slope
    assert torch.allclose(c.dh - c.dh[0], c.slope * c.b, rtol=1e-9, atol=1e-15)


def test_knob_curve_is_one_bandit_per_seed():
    assert torch.equal(knob_curve(0.3, 0.4, 0.5, 1.5).dh, knob_curve(0.3, 0.4, 0.5, 1.5, seed=1).dh)
    assert not torch.equal(knob_curve(0.3, 0.4, 0.5, 1.5).dh, knob_curve(0.3, 0.4, 0.5, 1.5, seed=2).dh)


def test_knob_curve_refuses_bad_inputs():
    with pytest.raises(ValueError, match="n_baselines"):
        knob_curve(0.3, 0.4, 0.5, 1.5, n_baselines=1)
    with pytest.raises(ValueError, match="open interval"):
        knob_curve(1.0, 0.4, 0.5, 1.5)
    with pytest.raises(ValueError, match="^k "):
        knob_curve(0.3, 1.0, 0.5, 1.5)
