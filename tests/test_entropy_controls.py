"""Tests for qae_lab.entropy_controls: Clip-Cov, KL-Cov and the sign masks against plain-Python loop references
and hand-computed cases."""

from __future__ import annotations

import math
import random

import pytest
import torch

from qae_lab.entropy_controls import (
    clip_cov_select,
    kl_cov_penalty,
    kl_cov_select,
    ppo_clip_active,
    sign_masked_advantages,
    token_covariance,
)


def _ref_cov(lp, adv, mask):
    """Cui et al.'s centred product, one token at a time."""
    n, t = len(lp), len(lp[0])
    valid = [(i, j) for i in range(n) for j in range(t) if mask[i][j]]
    if not valid:
        return [[0.0] * t for _ in range(n)]
    a = [[adv[i] if not isinstance(adv[i], list) else adv[i][j] for j in range(t)] for i in range(n)]
    mean_lp = sum(lp[i][j] for i, j in valid) / len(valid)
    mean_a = sum(a[i][j] for i, j in valid) / len(valid)
    return [[(lp[i][j] - mean_lp) * (a[i][j] - mean_a) if mask[i][j] else 0.0 for j in range(t)] for i in range(n)]


def _random_batch(rng, n=5, t=7):
    lp = [[-rng.expovariate(1.0) for _ in range(t)] for _ in range(n)]
    adv = [rng.choice([-1.2, -0.3, 0.0, 0.4, 1.7]) for _ in range(n)]
    mask = [[1 if j < rng.randint(1, t) else 0 for j in range(t)] for _ in range(n)]
    return lp, adv, mask


@pytest.mark.parametrize("seed", range(20))
def test_token_covariance_matches_the_loop(seed):
    rng = random.Random(seed)
    lp, adv, mask = _random_batch(rng)
    got = token_covariance(torch.tensor(lp), torch.tensor(adv), torch.tensor(mask))
    assert torch.allclose(got, torch.tensor(_ref_cov(lp, adv, mask)), atol=1e-6)
    # token-level advantages give the same as their broadcast response-level ones
    tok = torch.tensor(adv)[:, None].expand(len(adv), len(lp[0]))
    assert torch.allclose(token_covariance(torch.tensor(lp), tok, torch.tensor(mask)), got)


def test_token_covariance_by_hand_and_edge_cases():
    # one response of one valid token: its own mean, so 0
    assert token_covariance(torch.tensor([[-1.0, -9.0]]), torch.tensor([2.0]), torch.tensor([[1, 0]])).abs().sum() == 0
    assert token_covariance(torch.zeros(2, 3), torch.ones(2), torch.zeros(2, 3)).abs().sum() == 0
    lp = torch.tensor([[-1.0, -3.0]], requires_grad=True)
    assert not token_covariance(lp, torch.tensor([1.0]), torch.ones(1, 2)).requires_grad


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(logps=torch.zeros(3)), "logps must have 2 dimension"),
        (dict(advantages=torch.zeros(3)), "advantages must have shape"),
        (dict(mask=torch.full((2, 3), 2)), "mask must hold only 0 and 1"),
        (dict(advantages=torch.tensor([float("nan"), 0.0])), "advantages must be finite"),
    ],
)
def test_token_covariance_names_bad_input(bad, match):
    args = dict(logps=torch.zeros(2, 3), advantages=torch.zeros(2), mask=torch.ones(2, 3)) | bad
    with pytest.raises(ValueError, match=match):
        token_covariance(**args)


def test_ppo_clip_active_against_the_scalar_rule():
    rng = random.Random(3)
    lr = [[rng.uniform(-0.6, 0.6) for _ in range(6)] for _ in range(4)]
    adv = [1.0, -1.0, 0.5, -2.0]
    got = ppo_clip_active(torch.tensor(lr, dtype=torch.float64), torch.tensor(adv, dtype=torch.float64), 0.2, 0.28)
    for i in range(4):
        for j in range(6):
            r = math.exp(lr[i][j])
            clipped = min(max(r, 0.8), 1.28)
            assert bool(got[i, j]) == (-adv[i] * clipped > -adv[i] * r)
    with pytest.raises(ValueError, match="epsilon_low and epsilon_high must be >= 0"):
        ppo_clip_active(torch.zeros(1, 1), torch.ones(1), -0.1, 0.2)


def test_clip_cov_draws_the_fraction_from_the_band_only():
    rng = random.Random(0)
    cov = torch.tensor([[rng.uniform(-2, 7) for _ in range(50)] for _ in range(40)])
    mask = torch.ones(40, 50)
    mask[:, 45:] = 0
    exclude = torch.zeros(40, 50, dtype=torch.bool)
    exclude[0] = True
    band = (cov > 1) & (cov < 5) & mask.bool() & ~exclude
    for seed in range(5):
        pick = clip_cov_select(cov, mask, ratio=0.01, exclude=exclude, generator=torch.Generator().manual_seed(seed))
        assert int(pick.sum()) == int(0.01 * 40 * 45)  # 18 of the 1,800 valid tokens
        assert bool((pick <= band).all())  # only candidates
    # the same generator seed draws the same tokens; another seed draws others
    g = lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    assert torch.equal(
        clip_cov_select(cov, mask, 0.01, generator=g(1)), clip_cov_select(cov, mask, 0.01, generator=g(1))
    )
    assert not torch.equal(
        clip_cov_select(cov, mask, 0.01, generator=g(1)), clip_cov_select(cov, mask, 0.01, generator=g(2))
    )
    # the paper's 2e-4 of 1,800 tokens floors to 0: at least one token is clipped
    assert int(clip_cov_select(cov, mask).sum()) == 1
    # fewer candidates than the count: all of them
    few = torch.zeros(3, 3)
    few[1, 1] = 2.0
    assert clip_cov_select(few, torch.ones(3, 3), ratio=1.0).nonzero().tolist() == [[1, 1]]
    assert not clip_cov_select(torch.zeros(2, 2), torch.ones(2, 2), ratio=1.0).any()  # nothing in the band


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(ratio=0.0), r"ratio must lie in \(0, 1\]"),
        (dict(ratio=1.5), r"ratio must lie in \(0, 1\]"),
        (dict(lb=5.0, ub=1.0), "lb must be < ub"),
        (dict(lb=float("nan")), "lb must be finite"),
    ],
)
def test_clip_cov_names_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        clip_cov_select(torch.zeros(2, 2), torch.ones(2, 2), **kwargs)


@pytest.mark.parametrize("seed", range(10))
def test_kl_cov_takes_the_top_fraction_like_a_sort(seed):
    rng = random.Random(seed)
    n, t = 6, 9
    cov = [[rng.uniform(-3, 3) for _ in range(t)] for _ in range(n)]
    mask = [[1 if j < rng.randint(1, t) else 0 for j in range(t)] for _ in range(n)]
    ratio = rng.choice([0.05, 0.2, 0.5])
    got = kl_cov_select(torch.tensor(cov), torch.tensor(mask), ratio)
    valid = sorted(((cov[i][j], i, j) for i in range(n) for j in range(t) if mask[i][j]), reverse=True)
    k = max(int(ratio * len(valid)), 1)
    assert {(i, j) for _, i, j in valid[:k]} == {tuple(x) for x in got.nonzero().tolist()}
    assert not kl_cov_select(torch.ones(2, 2), torch.zeros(2, 2), 0.5).any()


def test_kl_cov_penalty_values_and_gradient():
    lp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old = torch.tensor([[-1.5, -1.0, -0.5]])
    sel = torch.tensor([[True, True, False]])
    pen = kl_cov_penalty(lp, old, sel, coef=2.0)
    assert torch.allclose(pen, torch.tensor([[1.0, 2.0, 0.0]]))
    pen.sum().backward()
    assert lp.grad.tolist() == [[2.0, -2.0, 0.0]]  # coef * sign(log ratio) on the selected tokens
    # on-policy (log ratio 0): no value and no gradient
    lp2 = torch.tensor([[-1.0]], requires_grad=True)
    kl_cov_penalty(lp2, lp2.detach(), torch.tensor([[True]])).sum().backward()
    assert lp2.grad.item() == 0.0
    with pytest.raises(ValueError, match="coef must be >= 0"):
        kl_cov_penalty(lp, old, sel, coef=-1.0)
    with pytest.raises(ValueError, match="old_logps must have the shape"):
        kl_cov_penalty(lp, torch.zeros(1, 2), sel)


def test_sign_masks_keep_one_side_exactly():
    rng = random.Random(1)
    a = [rng.choice([-2.0, -0.1, 0.0, 0.3, 1.0]) for _ in range(64)]
    t = torch.tensor(a, dtype=torch.float64)
    pos = sign_masked_advantages(t, "pos").tolist()
    neg = sign_masked_advantages(t, "neg").tolist()
    assert pos == [x if x > 0 else 0.0 for x in a]
    assert neg == [x if x < 0 else 0.0 for x in a]
    assert [p + q for p, q in zip(pos, neg)] == a
    assert sign_masked_advantages(t, "none").tolist() == a
    with pytest.raises(ValueError, match="advantage_mask must be one of"):
        sign_masked_advantages(t, "positive")
