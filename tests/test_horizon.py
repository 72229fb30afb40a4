"""Tests for qae_lab.horizon: normalised entropies, horizon weights (every rollout and SA-AH's selective rule),
the weighted mean, the normaliser factor."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from testkit.reference import ref_entropy, ref_horizon_weights

from qae_lab.horizon import (
    head_normalised_entropy,
    horizon_weights,
    normalised_entropy,
    normaliser_factor,
    selective_horizon_weights,
    weight_stats,
    weighted_token_mean,
)

T = torch.tensor


# ---------------------------------------------------------------- normalised_entropy


def test_entropy_extremes():
    v = 50
    assert torch.allclose(normalised_entropy(torch.zeros(2, 3, v)), torch.ones(2, 3))
    peaked = torch.full((1, 1, v), -1e4)
    peaked[..., 7] = 0.0
    assert normalised_entropy(peaked).item() == pytest.approx(0.0, abs=1e-6)


def test_entropy_matches_reference():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 37, generator=g, dtype=torch.float64) * 3
    got = normalised_entropy(logits)
    assert got.dtype == torch.float64
    for i in range(3):
        for t in range(4):
            want = ref_entropy(logits[i, t].tolist()) / math.log(37)
            assert got[i, t].item() == pytest.approx(want, rel=1e-10)


def test_top_k_estimate():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 5, 64, generator=g, dtype=torch.float64)
    got = normalised_entropy(logits, top_k=10)
    for i in range(2):
        for t in range(5):
            top = sorted(logits[i, t].tolist(), reverse=True)[:10]
            assert got[i, t].item() == pytest.approx(ref_entropy(top) / math.log(64), rel=1e-10)  # / log V, not log k
    assert torch.equal(normalised_entropy(logits, top_k=64), normalised_entropy(logits))
    assert torch.equal(normalised_entropy(logits, top_k=500), normalised_entropy(logits))  # k >= V: exact
    # the estimate ignores the tail, so it is below the exact entropy here
    assert torch.all(got <= normalised_entropy(logits) + 1e-12)


def test_entropy_chunking_dtype_and_masked_vocab():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(4, 6, 20, generator=g)
    assert torch.allclose(normalised_entropy(logits, chunk_rows=1), normalised_entropy(logits, chunk_rows=1000))
    assert normalised_entropy(logits.bfloat16()).dtype == torch.float32
    z = T([[[1.0, 1.0, float("-inf"), float("-inf")]]])  # masked vocabulary entries
    assert normalised_entropy(z).item() == pytest.approx(math.log(2) / math.log(4))


@pytest.mark.parametrize("top_k", [None, 3, 37])
@pytest.mark.parametrize("with_bias", [False, True])
def test_head_entropy_matches_projected_logits(top_k, with_bias):
    g = torch.Generator().manual_seed(3)
    hidden, weight = (
        torch.randn(3, 7, 8, generator=g, dtype=torch.float64),
        torch.randn(37, 8, generator=g, dtype=torch.float64),
    )
    bias = torch.randn(37, generator=g, dtype=torch.float64) if with_bias else None
    z = (hidden @ weight.T + (0 if bias is None else bias)) / 0.7  # (3, 7, V): the logits, by hand
    want = normalised_entropy(z, top_k)
    for chunk in (1, 5, 1000):  # chunk boundaries inside and across rows
        got = head_normalised_entropy(hidden, weight, bias, temperature=0.7, top_k=top_k, chunk_rows=chunk)
        assert got.shape == (3, 7) and torch.allclose(got, want, atol=1e-12)
    hidden.requires_grad_(True)
    assert not head_normalised_entropy(hidden, weight).requires_grad  # weights only: no graph
    assert head_normalised_entropy(torch.zeros(0, 4, 8), weight.float()).shape == (0, 4)


def test_head_entropy_integer_weight_is_refused_not_truncated():
    # V = 4, H = 1: z = W h = [8 * 0.5, 0, 0, 0] = [4, 0, 0, 0]
    p1 = math.exp(4) / (math.exp(4) + 3)
    p0 = 1 / (math.exp(4) + 3)
    want = -(p1 * math.log(p1) + 3 * p0 * math.log(p0)) / math.log(4)  # 0.18887
    h = torch.tensor([[[0.5]]])
    w = torch.tensor([[8], [0], [0], [0]])
    assert head_normalised_entropy(h, w.float()).item() == pytest.approx(want, abs=1e-6)
    # an int64 head used to truncate h to 0 and return the uniform 1.0; now it is refused
    with pytest.raises(ValueError, match=r"weight must be a floating-point tensor .*torch.int64"):
        head_normalised_entropy(h, w)
    # a bias of another floating dtype than the weight is cast to it
    assert head_normalised_entropy(h, w.double(), torch.zeros(4)).item() == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        ({"hidden": torch.zeros(2, 3, 4, dtype=torch.long)}, "hidden"),
        ({"weight": torch.zeros(5, 3)}, "weight"),
        ({"weight": torch.zeros(5)}, "weight"),
        ({"bias": torch.zeros(4)}, "bias"),
        ({"weight": torch.zeros(5, 4, dtype=torch.int64)}, "weight must be a floating-point tensor"),
        ({"weight": torch.zeros(5, 4, dtype=torch.int8)}, "weight .*dequantise"),
        ({"weight": torch.zeros(5, 4, dtype=torch.bool)}, "weight .*torch.bool"),
        ({"weight": [[0.0] * 4] * 5}, "weight must be a floating-point tensor .*got list"),
        ({"bias": torch.zeros(5, dtype=torch.int64)}, "bias must be a floating-point tensor"),
        ({"hidden": torch.zeros(2, 3, 4, dtype=torch.int32)}, "hidden .*torch.int32"),
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"chunk_rows": 0}, "chunk_rows"),
    ],
)
def test_head_entropy_bad_input(kwargs, msg):
    args = {"hidden": torch.zeros(2, 3, 4), "weight": torch.zeros(5, 4), **kwargs}
    with pytest.raises(ValueError, match=msg):
        head_normalised_entropy(args.pop("hidden"), args.pop("weight"), **args)


def test_entropy_gradient_flows():
    logits = torch.randn(1, 2, 5, requires_grad=True)
    normalised_entropy(logits).sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        ({"logits": torch.zeros(2, 3, dtype=torch.long)}, "floating-point"),
        ({"logits": [[0.0, 1.0]]}, "floating-point"),
        ({"logits": torch.zeros(2, 3, 1)}, "V >= 2"),
        ({"logits": torch.zeros(2, 3, 4), "top_k": 0}, "top_k"),
        ({"logits": torch.zeros(2, 3, 4), "top_k": 2.5}, "top_k"),
        ({"logits": torch.zeros(2, 3, 4), "chunk_rows": 0}, "chunk_rows"),
        ({"logits": torch.full((1, 1, 4), float("nan"))}, "finite"),
    ],
)
def test_entropy_bad_input(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        normalised_entropy(**kwargs)


# ---------------------------------------------------------------- horizon_weights


def test_horizon_weights_hand():
    h = T([[0.5, 0.0, 0.5, 0.3], [0.2, 0.2, 0.2, 0.2]])
    m = T([[1, 1, 1, 0], [1, 1, 1, 1]])
    w = horizon_weights(h, m, 2.0)
    e = math.exp
    want = [[e(-1.0), e(-1.0), e(-2.0), 0.0], [e(-0.4), e(-0.8), e(-1.2), e(-1.6)]]
    torch.testing.assert_close(w, T(want))


def test_horizon_weights_reference_random_with_left_and_right_padding():
    rng = random.Random(5)
    for _ in range(30):
        n, t = rng.randint(1, 5), rng.randint(1, 12)
        h = [[rng.random() for _ in range(t)] for _ in range(n)]
        mask = []
        for _ in range(n):
            lo, hi = sorted(rng.sample(range(t + 1), 2)) if t > 0 else (0, 0)
            mask.append([int(lo <= j < hi) for j in range(t)])
        alpha = rng.uniform(-1, 2)
        got = horizon_weights(T(h, dtype=torch.float64), T(mask), alpha)
        torch.testing.assert_close(got, T(ref_horizon_weights(h, mask, alpha), dtype=torch.float64))


h_and_mask = st.integers(1, 4).flatmap(
    lambda n: st.integers(1, 16).flatmap(
        lambda t: st.tuples(
            st.lists(st.lists(st.floats(0, 1), min_size=t, max_size=t), min_size=n, max_size=n),
            st.lists(st.lists(st.booleans(), min_size=t, max_size=t), min_size=n, max_size=n),
        )
    )
)


@given(h_and_mask, st.floats(0, 5))
def test_weights_in_unit_interval_and_non_increasing(hm, alpha):
    h, mask = T(hm[0], dtype=torch.float64), T(hm[1])
    w = horizon_weights(h, mask, alpha)
    real = w[mask]
    assert torch.all(real > 0) and torch.all(real <= 1)
    assert torch.all(w[~mask] == 0)
    for row, m in zip(w, mask):
        vals = row[m]
        assert torch.all(vals[1:] <= vals[:-1])


@given(h_and_mask)
def test_alpha_zero_is_plain_grpo(hm):
    h, mask = T(hm[0]), T(hm[1])
    assert torch.equal(horizon_weights(h, mask, 0.0), mask.float())
    adv = torch.linspace(-1, 1, h.shape[0])
    assert torch.equal(selective_horizon_weights(h, mask, adv, 0.0), mask.float())
    assert torch.equal(selective_horizon_weights(h, mask, adv, 0.0, selective=False), mask.float())


def test_negative_alpha_amplifies():
    w = horizon_weights(torch.full((1, 3), 0.5), torch.ones(1, 3), -0.25)
    assert torch.all(w > 1) and torch.all(w[0, 1:] > w[0, :-1])


def test_weights_are_detached():
    h = torch.full((2, 3), 0.4, requires_grad=True)
    assert not horizon_weights(h, torch.ones(2, 3), 0.5).requires_grad
    assert not selective_horizon_weights(h, torch.ones(2, 3), T([1.0, -1.0]), 0.5).requires_grad


@pytest.mark.parametrize(
    "args,msg",
    [
        ((torch.full((2, 3), 1.5), torch.ones(2, 3), 0.5), "h_norm must hold normalised entropies"),
        ((torch.full((2, 3), -0.1), torch.ones(2, 3), 0.5), "h_norm"),
        ((torch.full((2, 3), float("nan")), torch.ones(2, 3), 0.5), "h_norm must be finite"),
        ((torch.zeros(6), torch.ones(6), 0.5), "h_norm must have 2"),
        ((torch.zeros(2, 3), torch.ones(3, 2), 0.5), "mask must have shape"),
        ((torch.zeros(2, 3), torch.full((2, 3), 2), 0.5), "mask must hold only 0 and 1"),
        ((torch.zeros(2, 3), torch.ones(2, 3), float("nan")), "alpha"),
        ((torch.zeros(2, 3), torch.ones(2, 3), float("inf")), "alpha"),
        ((torch.zeros(2, 3), torch.ones(2, 3), "0.5"), "alpha"),
        ((torch.ones(1, 200), torch.ones(1, 200), -1.0), "overflow"),
    ],
)
def test_horizon_bad_input(args, msg):
    with pytest.raises(ValueError, match=msg):
        horizon_weights(*args)


# ---------------------------------------------------------------- selective_horizon_weights


def test_sa_ah_selective_vs_symmetric():
    h = torch.full((3, 3), 0.5)
    m = T([[1, 1, 1], [1, 1, 0], [1, 1, 1]])
    adv = T([0.7, -0.3, 0.0])
    w_h = horizon_weights(h, m, 1.0)
    sa = selective_horizon_weights(h, m, adv, 1.0)
    torch.testing.assert_close(sa[0], m[0].float())  # A > 0: full signal
    torch.testing.assert_close(sa[1], w_h[1])  # A < 0: discounted, padding 0
    torch.testing.assert_close(sa[2], m[2].float())  # A == 0 counts as non-negative
    assert sa[1, 2] == 0
    torch.testing.assert_close(selective_horizon_weights(h, m, adv, 1.0, selective=False), w_h)


@pytest.mark.parametrize(
    "args,kwargs,msg",
    [
        ((torch.zeros(2, 3), torch.ones(2, 3), T([1.0]), 0.5), {}, "advantages must have shape"),
        ((torch.zeros(2, 3), torch.ones(2, 3), T([1.0, float("nan")]), 0.5), {}, "advantages must be finite"),
        ((torch.zeros(2, 3), torch.ones(2, 3), T([1.0, 0.0]), 0.5), {"selective": "yes"}, "selective"),
    ],
)
def test_sa_ah_bad_input(args, kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        selective_horizon_weights(*args, **kwargs)


# ---------------------------------------------------------------- weighted_token_mean


def test_weighted_mean_hand_and_gradient():
    loss = T([[1.0, 2.0, 9.0], [3.0, 4.0, 9.0]], requires_grad=True)
    w = T([[1.0, 0.5, 0.0], [0.25, 0.25, 0.0]])
    out = weighted_token_mean(loss, w)
    assert out.item() == pytest.approx((1 + 1 + 0.75 + 1) / 2.0)
    out.backward()
    torch.testing.assert_close(loss.grad, w / w.sum())  # d/dl_t = w_t / sum(w)


def test_weighted_mean_with_mask_is_token_mean_and_zero_weights_give_zero():
    loss = torch.randn(3, 4)
    m = T([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]).float()
    torch.testing.assert_close(weighted_token_mean(loss, m), loss[m.bool()].mean())
    assert weighted_token_mean(loss, torch.zeros(3, 4)).item() == 0.0


@pytest.mark.parametrize(
    "loss,w,msg",
    [
        (torch.ones(2, 2), torch.ones(2, 3), "shape"),
        (torch.ones(2, 2), -torch.ones(2, 2), ">= 0"),
        (torch.ones(2, 2), torch.full((2, 2), float("inf")), "finite"),
        (torch.ones(2, 2, dtype=torch.long), torch.ones(2, 2), "per_token_loss"),
    ],
)
def test_weighted_mean_bad_input(loss, w, msg):
    with pytest.raises(ValueError, match=msg):
        weighted_token_mean(loss, w)


# ---------------------------------------------------------------- normaliser_factor


def test_normaliser_factor_hand():
    w = T([[1.0, 0.5, 0.0], [0.25, 0.25, 0.0]])
    m = T([[1, 1, 0], [1, 1, 0]])
    assert normaliser_factor(w, m).item() == 2.0  # 4 tokens / sum(w) = 2
    torch.testing.assert_close(normaliser_factor(w, m, per_sequence=True), T([[2 / 1.5], [2 / 0.5]]))
    assert normaliser_factor(w, m, skipped_tokens=4.0).item() == pytest.approx(8 / 6)  # (4 + 4) / (2 + 4)
    assert normaliser_factor(m.float(), m).item() == 1.0  # weight 1 everywhere: TRL's normaliser unchanged
    # weight on a padding position is not counted (TRL's loss masks it out)
    assert normaliser_factor(T([[1.0, 0.5, 7.0]]), T([[1, 1, 0]])).item() == pytest.approx(2 / 1.5)


def _trl_token_loss(l, m):  # TRL's bnpo / dapo normaliser: sum(l m) / sum(m)
    return (l * m).sum() / m.sum()


def _trl_sequence_loss(l, m):  # TRL's grpo normaliser: mean_i sum_t(l m) / sum_t m
    return ((l * m).sum(-1) / m.sum(-1)).mean()


@pytest.mark.parametrize("seed", range(5))
def test_normaliser_factor_makes_trl_loss_the_weighted_token_mean(seed):
    # the trainer feeds TRL per-token advantages A_i w_t c; a loss linear in A then becomes w c l
    gen = torch.Generator().manual_seed(seed)
    n, t = 6, 9
    m = (torch.arange(t)[None] < torch.randint(1, t + 1, (n,), generator=gen)[:, None]).long()  # right padding
    h = torch.rand(n, t, generator=gen)
    adv = torch.randn(n, generator=gen)
    w = selective_horizon_weights(h, m, adv, 1.5)  # (N, T), 0 on padding
    l = torch.randn(n, t, generator=gen)
    mf = m.float()
    # token level: sum(w c l m) / sum(m) = sum(w l) / sum(w)
    torch.testing.assert_close(_trl_token_loss(w * normaliser_factor(w, m) * l, mf), weighted_token_mean(l, w))
    # per sequence: the mean over rows of each row's sum(w l) / sum(w)
    c_i = normaliser_factor(w, m, per_sequence=True)  # (N, 1)
    want = torch.stack([weighted_token_mean(l[i : i + 1], w[i : i + 1]) for i in range(n)]).mean()
    torch.testing.assert_close(_trl_sequence_loss(w * c_i * l, mf), want)
    # sparse update: rows with A = 0 left out (loss 0, weight 1); the trainer rescales the kept rows'
    # loss by sum(m_kept) / sum(m); the skipped tokens enter the factor, and the result is the full
    # batch's weighted token mean
    keep = torch.arange(n) % 3 != 0
    w_full, l_full = w.clone(), l.clone()
    w_full[~keep], l_full[~keep] = mf[~keep], 0.0
    c = normaliser_factor(w[keep], m[keep], skipped_tokens=float(mf[~keep].sum()))
    got = _trl_token_loss(w[keep] * c * l[keep], mf[keep]) * mf[keep].sum() / mf.sum()
    torch.testing.assert_close(got, weighted_token_mean(l_full, w_full))


@pytest.mark.parametrize(
    "args,kwargs,msg",
    [
        ((torch.ones(2, 2), torch.ones(2, 3)), {}, "shape"),
        ((-torch.ones(2, 2), torch.ones(2, 2)), {}, ">= 0"),
        ((torch.full((2, 2), float("nan")), torch.ones(2, 2)), {}, "finite"),
        ((torch.ones(2), torch.ones(2)), {}, "dimension"),
        ((torch.ones(2, 2), torch.full((2, 2), 0.5)), {}, "0 and 1"),
        ((torch.ones(2, 2), torch.ones(2, 2)), {"skipped_tokens": -1.0}, "skipped_tokens"),
        ((torch.ones(2, 2), torch.ones(2, 2)), {"skipped_tokens": 2.0, "per_sequence": True}, "per_sequence"),
        ((torch.ones(2, 2), torch.ones(2, 2)), {"per_sequence": "yes"}, "per_sequence"),
    ],
)
def test_normaliser_factor_bad_input(args, kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        normaliser_factor(*args, **kwargs)


def test_weight_stats():
    w = T([[1.0, 1.0, 0.0], [0.5, 0.25, 0.0]])
    m = T([[1, 1, 0], [1, 1, 0]])
    s = weight_stats(w, m, T([1.0, -1.0]))
    assert s == pytest.approx({"w_mean_neg": 0.375, "effective_tokens_frac": 2.75 / 4})
    assert weight_stats(w, m, T([1.0, 0.0]))["w_mean_neg"] == 1.0  # no negative rollout


# ---------------------------------------------------------------- errors name the argument, exactly


_H, _W = torch.zeros(2, 3, 4), torch.zeros(5, 4)  # head_normalised_entropy's valid hidden (N, T, H = 4) and weight


@pytest.mark.parametrize(
    "fn,args,kwargs,msg",
    [
        # normalised_entropy
        (
            normalised_entropy,
            ([[0.0, 1.0]],),
            {},
            r"^logits must be a floating-point tensor of shape \(N, T, V\), got list$",
        ),
        (normalised_entropy, (torch.zeros(2, 3, dtype=torch.long),), {}, r"got Tensor of dtype torch\.int64$"),
        (normalised_entropy, (torch.zeros(2, 3, 4),), {"top_k": 0}, r"^top_k must be an int >= 1, got 0$"),
        (normalised_entropy, (torch.zeros(2, 3, 4),), {"chunk_rows": 0}, r"^chunk_rows must be an int >= 1, got 0$"),
        (
            normalised_entropy,
            (torch.full((1, 1, 4), float("nan")),),
            {},
            r"^logits must be finite or -inf \(NaN or \+inf found\)$",
        ),
        # head_normalised_entropy
        (head_normalised_entropy, ([[0.0] * 4], _W), {}, r"^hidden must be a floating-point tensor .*, got list$"),
        (
            head_normalised_entropy,
            (_H, torch.zeros(5, 3)),
            {},
            r"^weight must be a \(V, H\) tensor with H = 4 \(hidden's last dim\), got shape \(5, 3\)$",
        ),
        (
            head_normalised_entropy,
            (_H, _W, torch.zeros(4)),
            {},
            r"^bias must be None or a \(5,\) tensor, got shape \(4,\)$",
        ),
        (head_normalised_entropy, (_H, _W), {"temperature": float("nan")}, r"^temperature must be finite"),
        (head_normalised_entropy, (_H, _W), {"top_k": 0}, r"^top_k must be an int >= 1, got 0$"),
        (head_normalised_entropy, (_H, _W), {"chunk_rows": 0}, r"^chunk_rows must be an int >= 1, got 0$"),
        # horizon_weights
        (
            horizon_weights,
            (torch.full((2, 3), 1.5), torch.ones(2, 3), 0.5),
            {},
            r"^h_norm must hold normalised entropies in \[0, 1\] \(divide by log V\)$",
        ),
        (horizon_weights, (torch.zeros(2, 3), torch.ones(2, 3), float("nan")), {}, r"^alpha must be finite"),
        # selective_horizon_weights
        (
            selective_horizon_weights,
            (torch.zeros(2, 3), torch.ones(2, 3), T([1.0]), 0.5),
            {},
            r"^advantages must have shape \(2,\), one per row of h_norm, got \(1,\)$",
        ),
        (
            selective_horizon_weights,
            (torch.zeros(2, 3), torch.ones(2, 3), torch.ones(2, 1), 0.5),
            {},
            r"^advantages must have 1 dimension",
        ),
        # weighted_token_mean
        (
            weighted_token_mean,
            (torch.ones(2, 2, dtype=torch.long), torch.ones(2, 2)),
            {},
            r"^per_token_loss must be a floating-point tensor$",
        ),
        (weighted_token_mean, (torch.ones(2, 2), torch.full((2, 2), float("inf"))), {}, r"^weights must be finite"),
        (weighted_token_mean, (torch.ones(2, 2), -torch.ones(2, 2)), {}, r"^weights must be >= 0$"),
        # normaliser_factor
        (normaliser_factor, (torch.ones(2), torch.ones(2)), {}, r"^weights must have 2 dimension"),
        (normaliser_factor, (-torch.ones(2, 2), torch.ones(2, 2)), {}, r"^weights must be >= 0$"),
        (
            normaliser_factor,
            (torch.ones(2, 2), torch.ones(2, 2)),
            {"skipped_tokens": float("nan")},
            r"^skipped_tokens must be finite",
        ),
        (
            normaliser_factor,
            (torch.ones(2, 2), torch.ones(2, 2)),
            {"skipped_tokens": 2.0, "per_sequence": True},
            r"^skipped_tokens must be 0 with per_sequence=True ",
        ),
        # weight_stats
        (weight_stats, (torch.ones(2), torch.ones(2), T([1.0, -1.0])), {}, r"^weights must have 2 dimension"),
        (
            weight_stats,
            (torch.ones(2, 2), torch.ones(2, 2), torch.ones(2, 1)),
            {},
            r"^advantages must have 1 dimension",
        ),
    ],
)
def test_error_message_names_the_bad_argument_exactly(fn, args, kwargs, msg):
    # Bad input gets a clear error naming the argument (anchored, case-sensitive), and wrong-rank
    # weights/advantages are refused rather than broadcast into a wrong answer.
    # Planted: an argument name in as_real_tensor / check_int / check_finite_scalar -> None, "XX..XX" or upper case;
    # a message wrapped in "XX..XX" or lower-cased ("log v", "nan", "per_sequence=true"); the non-tensor suffix
    # "" -> "XXXX"; type(logits) -> type(None); the dtype suffix `... and False`; hidden.shape[-1] -> [+1] / [-2] and
    # weight.shape[0] -> [1] / w.shape[0] -> [1] in the shape messages; ndim=1 / ndim=2 -> None or dropped for
    # weight_stats' weights and advantages and selective_horizon_weights' advantages -> fails
    with pytest.raises(ValueError, match=msg):
        fn(*args, **kwargs)


# ---------------------------------------------------------------- boundaries of the valid input


def test_entropy_smallest_vocabulary_rank_and_top_k_are_valid():
    # V = 2 is the smallest vocabulary, a 1-D (V,) logits vector is "any leading dims" (-> a 0-dim H~), and
    # top_k = 1 is a valid (degenerate) estimate: one token keeps all the mass, H = 0.
    # Planted: `shape[-1] < 2` -> `<= 2` / `< 3`; `dim() < 1` -> `<= 1` / `< 2`; check_int(top_k, ..., 1) -> 2
    # (in normalised_entropy and in head_normalised_entropy) -> fails
    assert normalised_entropy(torch.zeros(1, 1, 2)).item() == pytest.approx(1.0, abs=1e-6)
    one_d = normalised_entropy(torch.zeros(4))
    assert one_d.shape == () and one_d.item() == pytest.approx(1.0, abs=1e-6)
    z = T([[[2.0, 1.0, 0.0, -1.0]]])
    assert normalised_entropy(z, top_k=1).item() == 0.0
    w = torch.eye(4, 2)  # V = 4, H = 2
    assert head_normalised_entropy(torch.ones(1, 1, 2), w, top_k=1).item() == 0.0


def test_horizon_weights_accept_h_norm_exactly_at_the_rounding_tolerance():
    # h_norm within the float32 slack of [0, 1] (1e-4) is accepted, the edges themselves included.
    # Planted: `h >= -_H_TOL` -> `h > -_H_TOL`; `h <= 1 + _H_TOL` -> `h < 1 + _H_TOL` -> fails
    tol = 1e-4
    h = T([[-tol, 1 + tol]], dtype=torch.float64)
    w = horizon_weights(h, torch.ones(1, 2), 1.0)
    assert w.tolist() == [[pytest.approx(math.exp(tol), rel=1e-12), pytest.approx(math.exp(-1.0), rel=1e-12)]]


def test_normaliser_factor_total_weight_below_one_is_not_clamped_to_one():
    # the clamp only guards a zero denominator (1e-12): one token of weight 0.5 gives c = 1 / 0.5 = 2.
    # Planted: clamp_min(1e-12) -> clamp_min(1.000000000001) (token level) -> fails
    assert normaliser_factor(T([[0.5, 0.0]]), T([[1, 0]])).item() == 2.0


def test_normaliser_factor_float64_counts_stay_exact_with_many_skipped_tokens():
    # float64 weights: the counts are float64 too; S = 2**24 + 1 is not representable in float32.
    # c = (4 + S) / (2 + S), hand-computed in float64.
    # Planted: the mask `.to(w.dtype)` -> `.to(None)` (stays float32, so sum(m) + S rounds in float32) -> fails
    s = float(2**24 + 1)
    w = T([[1.0, 0.5], [0.25, 0.25]], dtype=torch.float64)
    c = normaliser_factor(w, torch.ones(2, 2), skipped_tokens=s)
    assert c.dtype == torch.float64
    assert c.item() == pytest.approx((4.0 + s) / (2.0 + s), rel=1e-15)


def test_weighted_token_mean_keeps_the_loss_dtype():
    # the weights are cast to per_token_loss's dtype, so the loss keeps its (mixed-precision or float64) dtype.
    # Planted: w.to(per_token_loss.dtype) -> w.to(None) -> fails
    loss = T([[1.0, 2.0], [3.0, 4.0]])
    w = T([[1.0, 0.0], [0.5, 0.5]])
    out = weighted_token_mean(loss.bfloat16(), w)
    assert out.dtype == torch.bfloat16 and out.item() == 2.25
    out = weighted_token_mean(loss, [[1.0, 0.0], [0.5, 0.5]])  # list weights are float64: still a float32 loss
    assert out.dtype == torch.float32 and out.item() == 2.25


def test_weight_stats_without_real_tokens():
    # no real token at all: both summaries are 1.0 (nothing is discounted), not a division by zero.
    # Planted: `if n_tok` -> `if n_tok or True` (ZeroDivisionError); the fallback 1.0 -> 2.0 -> fails
    s = weight_stats(torch.zeros(2, 3), torch.zeros(2, 3), T([1.0, -1.0]))
    assert s == {"w_mean_neg": 1.0, "effective_tokens_frac": 1.0}


def test_weight_stats_counts_only_the_real_tokens_weights():
    # effective_tokens_frac is sum(w) over real tokens / their number: a weight left on padding does not count.
    # By hand: real weights 1 + 0.5 + 0.25 = 1.75 over 3 real tokens; the padding's 1s (and 0.5) are left out.
    # Planted: `(w * m).sum()` -> `w.sum()` (4.25 / 3) -> fails
    w = T([[1.0, 1.0, 1.0], [0.5, 0.25, 0.5]])
    m = T([[1, 0, 0], [1, 1, 0]])
    s = weight_stats(w, m, T([1.0, -1.0]))
    assert s == pytest.approx({"w_mean_neg": 0.75 / 2, "effective_tokens_frac": 1.75 / 3})
