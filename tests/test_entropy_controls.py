"""Tests for qae_lab.entropy_controls: Clip-Cov, KL-Cov and the sign masks against plain-Python loop references
and hand-computed cases."""

from __future__ import annotations

import math
import random

import pytest
import torch

from qae_lab.entropy_controls import (
    check_ratio,
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


_NAN = float("nan")


@pytest.mark.parametrize(
    "call, match",
    [
        # Planted: check_ratio's default name "ratio" -> "XXratioXX" / "RATIO" -> fails
        (lambda: check_ratio(0.0), r"^ratio must lie in \(0, 1\], got 0.0"),
        # Planted: check_finite_scalar(ratio, None) in check_ratio -> fails
        (lambda: check_ratio(_NAN, "kl_cov_ratio"), "^kl_cov_ratio must be finite"),
        # Planted: shape[0] -> shape[1] in _token_advantages' message -> fails
        (
            lambda: token_covariance(torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3)),
            r"^advantages must have shape \(2,\) or \(2, 3\), got \(3,\)",
        ),
        # Planted: clip_cov_select's cov name None / "XXcovXX" / "COV", or ndim=2 dropped -> fails
        (lambda: clip_cov_select(torch.zeros(3), torch.ones(3)), r"^cov must have 2 dimension"),
        # Planted: check_finite_scalar(ub, None / "XXubXX" / "UB") -> fails
        (lambda: clip_cov_select(torch.zeros(2, 2), torch.ones(2, 2), ub=_NAN), "^ub must be finite"),
        # Planted: kl_cov_select's cov name None / "XXcovXX" / "COV", or ndim=2 dropped -> fails
        (lambda: kl_cov_select(torch.zeros(3), torch.ones(3), 0.5), r"^cov must have 2 dimension"),
        # Planted: check_ratio(ratio, None / "XXratioXX" / "RATIO") in kl_cov_select -> fails
        (lambda: kl_cov_select(torch.zeros(2, 2), torch.ones(2, 2), 0.0), r"^ratio must lie in \(0, 1\]"),
        # Planted: kl_cov_penalty's old_logps name None / "XXold_logpsXX" / "OLD_LOGPS" -> fails
        (
            lambda: kl_cov_penalty(torch.zeros(1, 2), [[_NAN, 0.0]], torch.ones(1, 2)),
            "^old_logps must be finite",
        ),
        # Planted: ndim=2 dropped for old_logps (the shape check then speaks instead) -> fails
        (
            lambda: kl_cov_penalty(torch.zeros(1, 3), torch.zeros(3), torch.ones(1, 3)),
            r"^old_logps must have 2 dimension",
        ),
        # Planted: check_finite_scalar(coef, None / "XXcoefXX" / "COEF") -> fails
        (
            lambda: kl_cov_penalty(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), _NAN),
            "^coef must be finite",
        ),
        # Planted: `not floating or dim != 2` -> `not floating and dim != 2` (an integer (N, T) passes) -> fails
        (
            lambda: kl_cov_penalty(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2), torch.ones(1, 2)),
            "^logps must be a 2-dimensional floating-point tensor",
        ),
        # Planted: `not isinstance(...) or not floating` -> `... and ...` (a list reaches .is_floating_point) -> fails
        (
            lambda: kl_cov_penalty([[-1.0, -2.0]], torch.zeros(1, 2), torch.ones(1, 2)),
            "^logps must be a 2-dimensional floating-point tensor",
        ),
        # Planted: ppo_clip_active's log_ratio name None / "XXlog_ratioXX" / "LOG_RATIO" -> fails
        (lambda: ppo_clip_active(torch.tensor([[_NAN]]), torch.ones(1), 0.2, 0.2), "^log_ratio must be finite"),
        # Planted: ndim=2 dropped for log_ratio (a 1-D one then fails in expand, a RuntimeError) -> fails
        (lambda: ppo_clip_active(torch.zeros(3), torch.zeros(3), 0.2, 0.2), r"^log_ratio must have 2 dimension"),
        # Planted: check_finite_scalar(epsilon_low, None / "XXepsilon_lowXX" / "EPSILON_LOW") -> fails
        (lambda: ppo_clip_active(torch.zeros(1, 1), torch.ones(1), _NAN, 0.2), "^epsilon_low must be finite"),
        # Planted: check_finite_scalar(epsilon_high, None / "XXepsilon_highXX" / "EPSILON_HIGH") -> fails
        (lambda: ppo_clip_active(torch.zeros(1, 1), torch.ones(1), 0.2, _NAN), "^epsilon_high must be finite"),
        # Planted: sign_masked_advantages' name None / "XXadvantagesXX" / "ADVANTAGES", or ndim=1 dropped -> fails
        (lambda: sign_masked_advantages(torch.zeros(2, 2), "pos"), r"^advantages must have 1 dimension"),
    ],
)
def test_bad_input_error_names_the_argument(call, match):
    # the project's promise: a bad call fails at once with a ValueError naming the argument (and the rule broken)
    with pytest.raises(ValueError, match=match):
        call()


def test_clip_cov_band_is_open_and_bounds_ordered():
    # the band is lb < Cov_t < ub, strict at both ends (paper: 1 and 5); lb == ub is an empty band, refused
    # Planted: c > lb -> c >= lb -> fails; c < ub -> c <= ub -> fails
    cov = torch.tensor([[1.0, 5.0, 3.0]])
    assert clip_cov_select(cov, torch.ones(1, 3), ratio=1.0).tolist() == [[False, False, True]]
    # Planted: `not lb < ub` -> `not lb <= ub` -> fails
    with pytest.raises(ValueError, match="lb must be < ub, got lb=2.0, ub=2.0"):
        clip_cov_select(cov, torch.ones(1, 3), lb=2.0, ub=2.0)
    # one valid token, in the band: max(1, floor(ratio * 1)) = 1 token is clipped, that one
    # Planted: n_valid == 0 -> n_valid == 1 -> fails
    one = clip_cov_select(torch.tensor([[2.0, 3.0]]), torch.tensor([[1, 0]]), ratio=0.5)
    assert one.tolist() == [[True, False]]


def test_kl_cov_defaults_and_coef_range():
    # KL-Cov's documented defaults: ratio 2e-4 (of 4 tokens: floors to 0, so the one top token), coef 1
    # Planted: default ratio 2e-4 -> 1.0002 (refused by check_ratio) -> fails
    cov = torch.tensor([[0.5, 2.0], [3.0, 1.0]])
    assert kl_cov_select(cov, torch.ones(2, 2)).tolist() == [[False, False], [True, False]]
    lp, old, sel = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]]), torch.tensor([[True, True]])
    # Planted: default coef 1.0 -> 2.0 -> fails
    assert kl_cov_penalty(lp, old, sel).tolist() == [[0.5, 1.0]]
    # coef >= 0: 0 (penalty off) and a fraction are allowed
    # Planted: c < 0 -> c <= 0 -> fails; c < 0 -> c < 1 -> fails
    assert kl_cov_penalty(lp, old, sel, coef=0.0).tolist() == [[0.0, 0.0]]
    assert kl_cov_penalty(lp, old, sel, coef=0.5).tolist() == [[0.25, 0.5]]


def test_ppo_clip_active_accepts_a_zero_range():
    # epsilon_low, epsilon_high >= 0: with both 0 the clip is active wherever r != 1 moves against A's sign
    # r = e^0.5 = 1.65, e^-0.5 = 0.61, 1; A = +1: -1 > -1.65 only; A = -1: 1 > 0.61 only
    # Planted: lo < 0 -> lo <= 0 -> fails; hi < 0 -> hi <= 0 -> fails
    lr = torch.tensor([[0.5, -0.5, 0.0], [0.5, -0.5, 0.0]])
    got = ppo_clip_active(lr, torch.tensor([1.0, -1.0]), 0.0, 0.0)
    assert got.tolist() == [[True, False, False], [False, True, False]]


def test_sign_masks_put_zero_on_neither_side():
    # a zero advantage is neither positive nor negative: masked out by both sides, so no gradient reaches it
    # (the gradient of the kept entries is 1, of the masked ones 0)
    # Planted: a > 0 -> a >= 0 (pos) -> fails; a < 0 -> a <= 0 (neg) -> fails
    for keep, kept in (("pos", [0.0, 1.0, 0.0]), ("neg", [0.0, 0.0, 1.0])):
        a = torch.tensor([0.0, 0.7, -0.4], requires_grad=True)
        sign_masked_advantages(a, keep).sum().backward()
        assert a.grad.tolist() == kept, keep


def test_outputs_follow_the_policy_tensor_dtype():
    # results are computed in the dtype of the policy's tensor (logps / log_ratio), whatever the other inputs' dtype,
    # as the loss computes them; the docstring case, float64 advantages on float32 logps
    lp = torch.tensor([[-1.0, -3.0], [-4.0, -2.0]])
    # Planted: a.to(lp) -> a.to(None) in token_covariance (float64 result) -> fails
    cov = token_covariance(lp, torch.tensor([1.0, -1.0], dtype=torch.float64), torch.tensor([[1, 1], [1, 0]]))
    assert cov.dtype == torch.float32
    # Planted: old.to(logps) -> old.to(None) (a list of old log-probs is float64) -> fails
    assert kl_cov_penalty(lp, [[-1.5, -1.0], [-4.0, -2.5]], torch.ones(2, 2)).dtype == torch.float32
    # bf16 log-probabilities (mixed precision): the penalty stays bf16
    # Planted: sel.to(logps) -> sel.to(None) (a float32 mask promotes it) -> fails
    assert kl_cov_penalty(lp.bfloat16(), lp - 0.5, torch.ones(2, 2)).dtype == torch.bfloat16
    # ppo_clip_active decides in log_ratio's float32 like the loss's clamp(r) A vs r A: log-ratios a few ulps around
    # log(1 - 0.2) and log(1 + 0.28), where float32 and float64 products disagree on a few ties
    # Planted: a.to(lr) -> a.to(None) in ppo_clip_active (decided in float64) -> fails
    steps = []
    for bound in (math.log(0.8), math.log(1.28)):
        x = up = down = torch.tensor(bound, dtype=torch.float32)
        steps.append(x)
        for _ in range(40):
            up, down = torch.nextafter(up, torch.tensor(1.0)), torch.nextafter(down, torch.tensor(-1.0))
            steps += [up, down]
    lr_near = torch.stack(steps)[None, :].expand(61, -1)
    a64 = torch.linspace(-3, 3, 61, dtype=torch.float64) + 1 / 7
    assert torch.equal(ppo_clip_active(lr_near, a64, 0.2, 0.28), ppo_clip_active(lr_near, a64.float(), 0.2, 0.28))


def test_plain_python_inputs_and_graph_inputs():
    # lists mean what they say (float64) for logps / log_ratio and advantages alike
    # Planted: the `isinstance(..., torch.Tensor)` guard before .detach() -> `... or True` (a list has no .detach)
    # for token_covariance's logps and advantages, ppo_clip_active's log_ratio and advantages -> fails
    got = token_covariance([[-1.0, -3.0], [-4.0, -2.0]], [1.0, -1.0], [[1, 1], [1, 0]])
    want = torch.tensor([[10 / 9, -2 / 9], [16 / 9, 0.0]], dtype=torch.float64)  # means -8/3 and 1/3
    assert torch.allclose(got, want, rtol=0, atol=1e-15)
    assert ppo_clip_active([[0.0, 0.5, -0.5]], [1.0], 0.2, 0.28).tolist() == [[False, True, False]]
    # Cov_t is detached from the advantages too (it selects tokens; it is not differentiated)
    # Planted: advantages.detach() skipped (`... and False`) in token_covariance -> fails
    adv = torch.tensor([1.0, -1.0], requires_grad=True)
    assert not token_covariance(torch.tensor([[-1.0, -3.0], [-4.0, -2.0]]), adv, torch.ones(2, 2)).requires_grad


@pytest.mark.parametrize("logps", [[[-1.0]], torch.tensor([-1.0]), torch.tensor([[1]])])
def test_kl_cov_penalty_refuses_logps_that_are_not_a_float_matrix_in_these_words(logps):
    # Planted: the message's "(N, T)" lower-cased -> the anchored match fails
    with pytest.raises(ValueError, match=r"^logps must be a 2-dimensional floating-point tensor \(N, T\)$"):
        kl_cov_penalty(logps, torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool))
