"""Tests for qae_lab.advantages: hand-computed cases, a loop reference, properties, bad input."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.reference import ref_advantages, ref_quantile_linear, ref_quantile_paper

from qae_lab.advantages import (
    advantage_stats,
    group_advantages,
    hard_regime,
    mean_baseline,
    quantile_baseline,
    signal_groups,
)

T = torch.tensor


# ---------------------------------------------------------------- hand-computed cases


def test_conventions_differ_g8_k04_five_of_eight():
    r = T([1.0, 0, 1, 1, 0, 1, 0, 1])  # 5 of 8 correct, shuffled
    assert quantile_baseline(r, 8, 0.4).item() == 1.0  # paper: 4th smallest of 0,0,0,1,1,1,1,1
    assert quantile_baseline(r, 8, 0.4, method="linear").item() == pytest.approx(0.8)  # pos 2.8
    # ... so the paper's convention puts the prompt in the easy regime (only failures move)
    a = group_advantages(r, 8, k=0.4, scale="none")
    assert a.tolist() == [0.0, -1, 0, 0, -1, 0, -1, 0]
    a_lin = group_advantages(r, 8, k=0.4, quantile_method="linear", scale="none")
    assert a_lin.tolist() == pytest.approx([0.2, -0.8, 0.2, 0.2, -0.8, 0.2, -0.8, 0.2])


@pytest.mark.parametrize("k", [0.2, 0.4, 0.6, 0.8])
def test_conventions_agree_g16(k):
    # every success count of a binary group, plus non-binary rewards
    groups = [[1.0] * c + [0.0] * (16 - c) for c in range(17)]
    groups.append([float(x) for x in torch.randn(16, generator=torch.Generator().manual_seed(0))])
    r = T(sum(groups, []))
    assert torch.equal(quantile_baseline(r, 16, k), quantile_baseline(r, 16, k, method="linear"))


def test_float_rank_edge():
    # K * G can land a hair above an integer in binary floating point; b_K must not jump a rank
    assert 0.28 * 25 == 7.000000000000001 and 0.56 * 25 == 14.000000000000002
    r25 = torch.arange(25, 0, -1, dtype=torch.float32)  # 25 .. 1
    assert quantile_baseline(r25, 25, 0.28).item() == 7.0  # the 7th smallest, not the 8th
    assert quantile_baseline(r25, 25, 0.56).item() == 14.0
    r = T([5.0, 4, 3, 2, 1])
    assert quantile_baseline(r, 5, 0.6).item() == 3.0
    assert quantile_baseline(r, 5, 0.4).item() == 2.0  # K*G = 2 exactly -> 2nd smallest
    assert quantile_baseline(r, 5, 0.41).item() == 3.0  # K*G = 2.05 -> ceil = 3
    assert quantile_baseline(r, 5, 0.7).item() == 4.0  # 0.7 * 5 = 3.5 -> 4th


def test_two_regime_gate_hand():
    # G=4, K=0.4: hard while #correct <= 4 - ceil(1.6) = 2
    r = T([1.0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1])
    a = group_advantages(r, 4, k=0.4, scale="none")
    assert a.tolist() == [1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0]
    # with the group std: {1,0,0,0}: std = 0.5 -> A = 1 / 0.5
    a = group_advantages(r, 4, k=0.4, eps=0.0)
    assert a[0].item() == pytest.approx(2.0)
    assert a[11].item() == pytest.approx(-2.0)
    assert a[12:].tolist() == [0.0] * 8  # all-equal groups: 0, not 0/0


def test_mean_baseline_grpo_and_dr_grpo_hand():
    r = T([1.0, 0, 0, 0])
    assert mean_baseline(r, 4).item() == 0.25
    assert group_advantages(r, 4, baseline="mean", scale="none").tolist() == [0.75, -0.25, -0.25, -0.25]
    grpo = group_advantages(r, 4, baseline="mean", eps=0.0)
    assert grpo.tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5])


def test_batch_scale_hand():
    r = T([1.0, 0, 1, 1])  # two groups of 2; batch std (Bessel) = 0.5
    a = group_advantages(r, 2, baseline="mean", scale="batch", eps=0.0)
    assert a.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0])


def test_non_binary_quantile_hand():
    r = T([0.1, 0.9, 0.5, 0.7, 0.3])  # sorted 0.1 0.3 0.5 0.7 0.9
    assert quantile_baseline(r, 5, 0.5).item() == pytest.approx(0.5)  # ceil(2.5) = 3rd
    assert quantile_baseline(r, 5, 0.5, method="linear").item() == pytest.approx(0.5)
    assert quantile_baseline(r, 5, 0.3, method="linear").item() == pytest.approx(0.34)  # pos 1.2: 0.3 + 0.2*0.2


def test_dtypes_and_devices():
    r64 = torch.tensor([1.0, 0, 0, 1], dtype=torch.float64)
    assert group_advantages(r64, 2).dtype == torch.float64
    assert group_advantages(torch.tensor([1, 0, 0, 1]), 2).dtype == torch.float32  # ints accepted
    # bools: b = 0 (1st smallest), std(1, 0) = 1/sqrt(2) -> A = sqrt(2), 0
    assert group_advantages(torch.tensor([True, False]), 2).tolist() == pytest.approx([2**0.5, 0.0], abs=1e-4)
    bf = torch.tensor([1.0, 0, 0, 0], dtype=torch.bfloat16)
    assert torch.allclose(group_advantages(bf, 4), group_advantages(bf.float(), 4))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    g = torch.Generator().manual_seed(1)
    r = (torch.rand(64 * 16, generator=g) < 0.4).float()
    for method in ("paper", "linear"):
        cpu = group_advantages(r, 16, quantile_method=method)
        gpu = group_advantages(r.cuda(), 16, quantile_method=method)
        assert gpu.device.type == "cuda"
        torch.testing.assert_close(gpu.cpu(), cpu)


# ---------------------------------------------------------------- against the loop reference


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("method", ["paper", "linear"])
def test_matches_reference_random(binary, method):
    rng = random.Random(1234 + binary)
    for _ in range(150):
        g = rng.randint(2, 32)
        b = rng.randint(1, 6)
        k = round(rng.uniform(0.01, 0.99), 3)
        if binary:
            p = rng.random()
            rewards = [float(rng.random() < p) for _ in range(b * g)]
        else:
            rewards = [round(rng.gauss(0, 2), 2) for _ in range(b * g)]
        r = torch.tensor(rewards, dtype=torch.float64)
        want_b = [
            (ref_quantile_paper if method == "paper" else ref_quantile_linear)(rewards[i : i + g], k)
            for i in range(0, b * g, g)
        ]
        torch.testing.assert_close(quantile_baseline(r, g, k, method=method), torch.tensor(want_b, dtype=torch.float64))
        for baseline in ("mean", "quantile"):
            for scale in ("group", "batch", "none"):
                got = group_advantages(r, g, baseline=baseline, k=k, quantile_method=method, scale=scale)
                want = ref_advantages(rewards, g, baseline, k, method, scale, 1e-6)
                torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------- properties

groups = st.integers(2, 16).flatmap(
    lambda g: st.tuples(
        st.just(g),
        st.integers(1, 4).flatmap(
            lambda b: st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=b * g, max_size=b * g)
        ),
    )
)
ks = st.floats(0.01, 0.99)


@given(
    st.integers(2, 16),
    st.integers(1, 4),
    st.floats(-5, 5, width=32),
    ks,
    st.sampled_from(["paper", "linear"]),
    st.sampled_from(["mean", "quantile"]),
    st.sampled_from(["group", "batch", "none"]),
)
def test_all_equal_groups_get_zero(g, b, value, k, method, baseline, scale):
    # exactly zero, although the float32 mean of G copies of a value can differ from it by rounding
    r = torch.full((b * g,), value)
    a = group_advantages(r, g, baseline=baseline, k=k, quantile_method=method, scale=scale)
    assert torch.count_nonzero(a) == 0


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_all_equal_group_is_zeroed_beside_groups_with_larger_and_smaller_rewards(scale):
    # each group is judged on its own max == min: seven 0.1s (their float32 mean is 0.1 + 7.45e-9) get exactly 0
    # although the batch holds both a larger (1) and a smaller (-1) reward
    # Planted: r.amax(dim=None) == r.amin(dim=1) -> fails; r.amax(dim=1) == r.amin(dim=None) -> fails
    r = T([0.1] * 7 + [-1.0, 1, 0, 0, 0, 0, 0])
    a = group_advantages(r, 7, baseline="mean", scale=scale)
    assert a[:7].tolist() == [0.0] * 7
    assert a[7].item() < 0 < a[8].item() and a[9:].tolist() == [0.0] * 5


@given(groups, st.sampled_from(["group", "none"]))
def test_mean_baseline_sums_to_zero(gr, scale):
    g, rewards = gr
    a = group_advantages(torch.tensor(rewards, dtype=torch.float64), g, baseline="mean", scale=scale)
    assert torch.allclose(a.view(-1, g).sum(1), torch.zeros(len(rewards) // g, dtype=torch.float64), atol=1e-6)


@given(groups, ks, st.sampled_from(["paper", "linear"]))
def test_quantile_within_group_range(gr, k, method):
    g, rewards = gr
    r = torch.tensor(rewards)
    b = quantile_baseline(r, g, k, method=method)
    assert torch.all(b >= r.view(-1, g).amin(1)) and torch.all(b <= r.view(-1, g).amax(1))


@given(
    st.integers(2, 32).flatmap(
        lambda g: st.tuples(
            st.just(g), st.lists(st.booleans(), min_size=g, max_size=4 * g).map(lambda x: x[: len(x) // g * g])
        )
    ),
    ks,
    st.sampled_from(["group", "batch", "none"]),
)
def test_binary_zero_fraction_matches_gate(gr, k, scale):
    g, bits = gr
    r = torch.tensor(bits, dtype=torch.float32)
    a = group_advantages(r, g, k=k, scale=scale)
    # the gate: hard (p <= 1-K) -> failures get 0 (G - c zeros); easy -> successes get 0 (c zeros)
    want = 0
    for start in range(0, len(bits), g):
        c = sum(bits[start : start + g])
        hard = c <= g - math.ceil(round(k * g, 9))
        want += (g - c) if hard else c
    assert int((a == 0).sum()) == want
    stats = advantage_stats(r, a, g, k)
    assert stats["zero_adv_frac"] == pytest.approx(want / len(bits))
    assert stats["hard_frac"] + stats["easy_frac"] == pytest.approx(1.0)
    assert stats["zero_adv_frac"] + stats["pos_frac"] + stats["neg_frac"] == pytest.approx(1.0)


@settings(max_examples=50)
@given(st.integers(2, 32), ks)
def test_hard_regime_is_p_le_one_minus_k(g, k):
    counts = torch.arange(g + 1)
    got = hard_regime(counts, g, k)
    # p <= 1 - K, with the same tolerance for K*G sitting on an integer
    want = torch.tensor([c <= g - math.ceil(round(k * g, 9)) for c in range(g + 1)])
    assert torch.equal(got, want)
    # ... and it is exactly "the paper's baseline is 0"
    r = torch.cat([torch.tensor([1.0] * c + [0.0] * (g - c)) for c in range(g + 1)])
    assert torch.equal(quantile_baseline(r, g, k) == 0, want)


def test_advantage_stats_hand():
    r = T([1.0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0])
    a = group_advantages(r, 4, k=0.4)
    s = advantage_stats(r, a, 4, 0.4)
    assert s == pytest.approx(
        {
            "zero_adv_frac": 10 / 12,
            "pos_frac": 1 / 12,
            "neg_frac": 1 / 12,
            "hard_frac": 2 / 3,
            "easy_frac": 1 / 3,
            "all_equal_frac": 1 / 3,
            "success_rate": 4 / 12,
            "neg_correct": 0.0,
            "neg_correct_frac": 0.0,
        }
    )
    # composite rewards: successes are those at or above the threshold
    s = advantage_stats(r * 5 + 1, a, 4, 0.4, success_threshold=6.0)
    assert s["success_rate"] == pytest.approx(4 / 12)
    # another score decides success (the correctness reward's own, whatever its weight in the trained reward):
    # 0.4 * r is below any threshold of a 0/1 reward, yet the successes are those of r
    assert advantage_stats(0.4 * r, a, 4, 0.4, success=r > 0.5) == pytest.approx(advantage_stats(r, a, 4, 0.4))
    with pytest.raises(ValueError, match=r"success must be a bool tensor of shape \(12,\), got torch.float32 \(12,\)"):
        advantage_stats(r, a, 4, 0.4, success=r)


def test_advantage_stats_neg_correct_frac_and_all_equal_hand():
    # one success (the correctness verdict), below the mean of its composite rewards: 1 of 1 successes punished
    r = T([1.0, 2, 2, 2])  # mean 1.75
    a = group_advantages(r, 4, baseline="mean")
    s = advantage_stats(r, a, 4, 0.4, success=T([True, False, False, False]))
    assert (s["neg_correct"], s["neg_correct_frac"]) == (1.0, 1.0)
    # four successes (>= 5), the two 5.5s below the mean 6.5: 2 of 4
    r = T([7.5, 7.5, 5.5, 5.5])
    s = advantage_stats(r, group_advantages(r, 4, baseline="mean"), 4, 0.4, success_threshold=5.0)
    assert (s["neg_correct"], s["neg_correct_frac"]) == (2.0, 0.5)
    # all_equal_frac judges each group by its own max and min: [1, 1] and [0, 0] are all equal, [0, 1] is not
    r = T([1.0, 1, 0, 1, 0, 0])
    assert advantage_stats(r, group_advantages(r, 2), 2, 0.4)["all_equal_frac"] == pytest.approx(2 / 3)
    # Planted: / max(n_success, 2) -> fails; neg_correct * max(n_success, 1) -> fails;
    # r.amax(dim=1) == r.amin(dim=None) in all_equal_frac -> fails


# ---------------------------------------------------------------- bad input

GOOD = T([1.0, 0, 0, 1])


@pytest.mark.parametrize("k", [0, 1, -0.1, 1.5, float("nan"), float("inf"), True, "0.4", None, T([0.2, 0.3])])
def test_bad_k(k):
    with pytest.raises(ValueError, match="k"):
        quantile_baseline(GOOD, 2, k)
    with pytest.raises(ValueError, match="k"):
        group_advantages(GOOD, 2, k=k)
    with pytest.raises(ValueError, match="k"):
        advantage_stats(GOOD, GOOD, 2, k)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_rewards(bad):
    r = T([1.0, bad, 0, 0])
    for fn in (
        lambda: quantile_baseline(r, 2, 0.4),
        lambda: group_advantages(r, 2),
        lambda: mean_baseline(r, 2),
        lambda: advantage_stats(r, GOOD, 2, 0.4),
    ):
        with pytest.raises(ValueError, match="rewards must be finite"):
            fn()


@pytest.mark.parametrize(
    "g,msg", [(3, "not a multiple"), (1, ">= 2"), (0, ">= 2"), (-2, ">= 2"), (2.0, "int"), (True, "int"), ("2", "int")]
)
def test_bad_group_size(g, msg):
    with pytest.raises(ValueError, match=msg):
        group_advantages(GOOD, g)
    with pytest.raises(ValueError, match=msg):
        quantile_baseline(GOOD, g, 0.4)


@pytest.mark.parametrize(
    "rewards,msg",
    [
        (torch.ones(2, 2), "dimension"),
        (torch.tensor(1.0), "dimension"),
        (torch.empty(0), "empty"),
        (torch.ones(4, dtype=torch.complex64), "real"),
        ("1,0,0,1", "real-valued tensor"),
        ([[1, 0], [1]], "tensor"),
    ],
)
def test_bad_rewards(rewards, msg):
    with pytest.raises(ValueError, match=msg):
        group_advantages(rewards, 2)


def test_lists_are_accepted():
    assert group_advantages([1, 0, 0, 1], 2, scale="none").tolist() == [1.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"baseline": "median"}, "baseline"),
        ({"scale": "std"}, "scale"),
        ({"quantile_method": "nearest"}, "quantile_method"),
        ({"eps": -1e-6}, "eps"),
        ({"eps": float("nan")}, "eps"),
    ],
)
def test_bad_options(kwargs, name):
    with pytest.raises(ValueError, match=name):
        group_advantages(GOOD, 2, **kwargs)


def test_bad_method_and_stats_shapes():
    with pytest.raises(ValueError, match="method"):
        quantile_baseline(GOOD, 2, 0.4, method="lower")
    with pytest.raises(ValueError, match="advantages must have shape"):
        advantage_stats(GOOD, T([1.0, 0]), 2, 0.4)
    with pytest.raises(ValueError, match="success_threshold"):
        advantage_stats(GOOD, GOOD, 2, 0.4, success_threshold=float("nan"))
    with pytest.raises(ValueError, match="advantages must be finite"):
        advantage_stats(GOOD, T([1.0, float("nan"), 0, 0]), 2, 0.4)


@pytest.mark.parametrize(
    "call,msg",
    [
        (lambda: group_advantages(GOOD, 2, baseline="median"), r"^baseline must be one of"),
        (lambda: group_advantages(GOOD, 2, scale="std"), r"^scale must be one of"),
        (lambda: group_advantages(GOOD, 2, quantile_method="nearest"), r"^quantile_method must be one of"),
        (lambda: group_advantages(GOOD, 2, eps=float("nan")), r"^eps must be finite"),
        (lambda: quantile_baseline(GOOD, 2, 0.4, method="lower"), r"^method must be one of"),
        (lambda: advantage_stats(GOOD, GOOD, 2, 0.4, success_threshold=float("inf")), r"^success_threshold must be"),
        # (4, 1) advantages have 4 rows like the rewards, yet would broadcast against the (4,) success mask
        (lambda: advantage_stats(GOOD, GOOD[:, None], 2, 0.4), r"^advantages must have 1 dimension"),
    ],
)
def test_bad_input_error_starts_with_the_arguments_name(call, msg):
    # the project's promise: bad input gets a clear error naming the argument, as the caller spelled it
    # Planted: check_choice(baseline, "XXbaselineXX", ...) (likewise scale, quantile_method, eps, method,
    # success_threshold) -> fails; as_real_tensor(advantages, "advantages", ndim=None) or no ndim -> fails
    with pytest.raises(ValueError, match=msg):
        call()


def test_linear_matches_torch_quantile_and_keeps_exact_zeros():
    g = torch.Generator().manual_seed(3)
    for G in (2, 3, 5, 8, 16, 31):
        for dtype in (torch.float32, torch.float64):
            r = torch.randn(7 * G, generator=g, dtype=dtype)
            for k in (0.05, 0.2, 0.4, 0.5, 0.6, 0.8, 0.93):
                want = torch.quantile(r.view(-1, G), k, dim=1, interpolation="linear")
                torch.testing.assert_close(quantile_baseline(r, G, k, method="linear"), want)
    # K*(G-1) = 0.28 * 25 = 7.000000000000001: torch.quantile returns ~9e-16 for a group whose 8th
    # smallest reward is 1 and 7th is 0; the advantages of its zeros must stay exactly 0
    r = torch.tensor([0.0] * 8 + [1.0] * 18, dtype=torch.float64)
    assert 0 < torch.quantile(r, 0.28, interpolation="linear").item() < 1e-12
    assert quantile_baseline(r, 26, 0.28, method="linear").item() == 0.0
    assert int((group_advantages(r, 26, k=0.28, quantile_method="linear") == 0).sum()) == 8


# ---------------------------------------------------------------- huge rewards

F32_MAX = torch.finfo(torch.float32).max


@pytest.mark.parametrize("dtype,big", [(torch.float32, 3e38), (torch.float64, 1.5e308)])
def test_huge_rewards_hand(dtype, big):
    # R = [x, -x, x, -x]: R_i - b and the std's squares overflow if computed directly
    r = torch.tensor([big, -big, big, -big], dtype=dtype)
    big = r[0].item()  # the value the dtype holds
    # mean: b = 0, std = x * 2/sqrt(3) -> A = +-sqrt(3)/2
    a = group_advantages(r, 4, baseline="mean")
    torch.testing.assert_close(a, torch.tensor([1, -1, 1, -1], dtype=dtype) * 3**0.5 / 2)
    # K = 0.4: b = 2nd smallest = -x -> A = 2x / std = sqrt(3) for +x, 0 for -x
    for scale in ("group", "batch"):
        a = group_advantages(r, 4, k=0.4, scale=scale)
        torch.testing.assert_close(a, torch.tensor([1, 0, 1, 0], dtype=dtype) * 3**0.5)
    assert group_advantages(r, 4, baseline="mean", scale="none").tolist() == [big, -big, big, -big]
    # baselines alone: the mean of [x, x, 0, 0] is x/2 (its sum 2x overflows), the median of [x, -x] is 0
    assert mean_baseline(torch.tensor([big, big, 0, 0], dtype=dtype), 4).item() == big / 2
    assert quantile_baseline(torch.tensor([big, -big], dtype=dtype), 2, 0.5, method="linear").item() == 0.0
    assert quantile_baseline(torch.tensor([big, -big], dtype=dtype), 2, 0.25, method="linear").item() == -big / 2


def test_huge_rewards_match_float64_reference():
    r = torch.tensor([3e38, 0, 0, 0, 3e38, 3e38, -3e38, 1.0])
    for baseline in ("mean", "quantile"):
        for method in ("paper", "linear"):
            for scale in ("group", "batch"):
                got = group_advantages(r, 4, baseline=baseline, k=0.4, quantile_method=method, scale=scale)
                want = ref_advantages(r.double().tolist(), 4, baseline, 0.4, method, scale, 1e-6)
                torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float32))


def test_huge_rewards_with_scale_none_refuse_rather_than_overflow():
    # R - b = 6e38 has no float32 value: an error naming rewards and scale, not inf
    r = torch.tensor([3e38, -3e38, 3e38, -3e38])
    with pytest.raises(ValueError, match=r"rewards .*overflows with scale='none'"):
        group_advantages(r, 4, k=0.4, scale="none")
    # ... while the same rewards in float64 are fine
    x = r[0].item()
    assert group_advantages(r.double(), 4, k=0.4, scale="none").tolist() == [2 * x, 0, 2 * x, 0]


def test_pow2_scale_is_the_documented_power_of_two():
    # docs/implementation.md: s is a power of two with max|R| / 2 < s <= max|R|, and s = 1 when every |R| < 1
    # (ordinary rewards untouched); a power-of-two scaling is exact, so only this helper shows which s is taken
    # Planted: (e - 2).clamp_min(0) -> fails (s = 1 for max|R| = 3); (e - 1).clamp_min(1) -> fails (s = 2 for 0.5)
    from qae_lab.advantages import _pow2_scale

    r = T([[3.0, -1], [-4.0, 0], [2.0, 1], [0.5, 0.25], [0.0, 0], [1.0, -0.5], [F32_MAX, -F32_MAX]])
    want = [2.0, 4.0, 2.0, 1.0, 1.0, 1.0, 2.0**127]
    assert _pow2_scale(r).tolist() == [[w] for w in want]
    m = torch.tensor([[x] for x in (1e-30, 0.99, 1.5, 7.0, 8.0, 1000.0, 3e38)])
    s = _pow2_scale(m)
    assert torch.all(torch.where(m < 1, s == 1, (m / 2 < s) & (s <= m)))
    assert torch.equal(torch.frexp(s).mantissa, torch.full_like(s, 0.5))  # powers of two


def test_an_underflowing_std_with_eps_zero_gives_no_blow_up():
    # float64 rewards 0 and 1e-170: the squared deviations (~1e-341) underflow, so std = 0 with eps = 0 although the
    # group is not all equal; the advantages must stay finite and within |A| <= sqrt(2 (G - 1)) (here they are 0),
    # never R_i - b divided by the tiniest float (~1e137)
    # Planted: torch.where(denom >= 0, ...) in _scaled_deviation -> fails
    r = torch.tensor([0.0, 1e-170], dtype=torch.float64)
    for baseline in ("mean", "quantile"):
        for scale in ("group", "batch"):
            a = group_advantages(r, 2, baseline=baseline, k=0.4, scale=scale, eps=0.0)
            assert bool(torch.isfinite(a).all()) and a.abs().max().item() <= math.sqrt(2), (baseline, scale)


def any_finite_groups(width):
    return st.integers(2, 8).flatmap(
        lambda g: st.tuples(
            st.just(g),
            st.integers(1, 3).flatmap(
                lambda b: st.lists(
                    st.floats(allow_nan=False, allow_infinity=False, width=width), min_size=b * g, max_size=b * g
                )
            ),
        )
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@given(
    data=st.data(),
    k=ks,
    method=st.sampled_from(["paper", "linear"]),
    baseline=st.sampled_from(["mean", "quantile"]),
    scale=st.sampled_from(["group", "batch", "none"]),
)
def test_finite_rewards_give_finite_advantages(dtype, data, k, method, baseline, scale):
    # any finite rewards, up to the dtype's largest value: finite baselines and advantages
    g, rewards = data.draw(any_finite_groups(32 if dtype == torch.float32 else 64))
    r = torch.tensor(rewards, dtype=dtype)
    b = quantile_baseline(r, g, k, method=method) if baseline == "quantile" else mean_baseline(r, g)
    assert bool(torch.isfinite(b).all())
    try:
        a = group_advantages(r, g, baseline=baseline, k=k, quantile_method=method, scale=scale)
    except ValueError as err:  # only scale="none" may refuse, and only when R - b truly overflows
        assert scale == "none" and "overflows" in str(err)
        rows = [rewards[i : i + g] for i in range(0, len(rewards), g)]  # Python floats: 2x max still finite
        assert max(max(row) / 2 - min(row) / 2 for row in rows) > torch.finfo(dtype).max / 2
        return
    assert bool(torch.isfinite(a).all())
    if scale == "group":  # |R_i - b| <= range <= sqrt(2 (G-1)) std (Bessel): bounded advantages
        assert a.abs().max().item() <= math.sqrt(2 * (g - 1)) + 1e-3


@given(
    st.integers(2, 8).flatmap(
        lambda g: st.tuples(
            st.just(g),
            st.integers(1, 3).flatmap(lambda b: st.lists(st.integers(-1000, 1000), min_size=b * g, max_size=b * g)),
        )
    ),
    st.integers(0, 118),
    ks,
    st.sampled_from(["paper", "linear"]),
    st.sampled_from(["mean", "quantile"]),
    st.sampled_from(["group", "batch", "none"]),
)
def test_scaling_rewards_by_a_power_of_two_is_exact(gr, j, k, method, baseline, scale):
    # A(2^j R) = A(R) with the std scale (eps = 0), 2^j A(R) without; exactly, up to |R| = 3.3e38
    g, rewards = gr
    r = torch.tensor(rewards, dtype=torch.float32)
    kw = {"baseline": baseline, "k": k, "quantile_method": method, "scale": scale, "eps": 0.0}
    small = group_advantages(r, g, **kw)
    if scale == "none" and (small.abs().max().item() * 2.0**j > F32_MAX):
        with pytest.raises(ValueError, match="overflows"):
            group_advantages(r * 2.0**j, g, **kw)
        return
    big = group_advantages(r * 2.0**j, g, **kw)
    assert torch.equal(big, small * 2.0**j if scale == "none" else small)


# ---------------------------------------------------------------- hard_regime input


def test_hard_regime_accepts_lists_and_whole_floats():
    assert hard_regime([1, 2, 4, 5], 8, 0.4).tolist() == [True, True, True, False]
    assert hard_regime(T([4.0, 5.0]), 8, 0.4).tolist() == [True, False]
    assert hard_regime(3, 8, 0.4).item() is True
    assert hard_regime(torch.tensor([[0, 8]], dtype=torch.uint8), 8, 0.4).tolist() == [[True, False]]


@pytest.mark.parametrize(
    "counts,msg",
    [
        ([-5, 2], r"success_count must lie in \[0, group_size=8\], got -5"),
        (torch.tensor([100]), r"success_count must lie in \[0, group_size=8\], got 100"),
        (9, r"\[0, group_size=8\], got 9"),
        ([2.5], r"success_count must be whole numbers in \[0, group_size=8\], got 2.5"),
        ([2.0000001], "whole numbers"),
        (T([float("nan")]), "finite"),
        (torch.tensor([True, False]), "bool"),
        ("3", "success_count"),
        ([[1, 2], [3]], "success_count"),
    ],
)
def test_hard_regime_bad_counts(counts, msg):
    with pytest.raises(ValueError, match=msg):
        hard_regime(counts, 8, 0.4)


@pytest.mark.parametrize(
    "g,k,msg",
    [
        (1, 0.4, "group_size must be >= 2"),
        (0, 0.4, "group_size"),
        (8.0, 0.4, "group_size must be an int"),
        (8, 0.0, r"k must lie in .*\(0, 1\)"),
        (8, 1.0, r"\(0, 1\)"),
        (8, float("nan"), "k"),
    ],
)
def test_hard_regime_bad_group_size_and_k(g, k, msg):
    with pytest.raises(ValueError, match=msg):
        hard_regime([1, 2], g, k)


# ---------------------------------------------------------------- dynamic sampling's filter


@pytest.mark.parametrize("g", [2, 3, 4, 5, 8])
def test_signal_is_dapos_rule_for_binary_rewards_under_every_baseline_and_k(g):
    # every 0/1 pattern of a group: DAPO keeps it when 0 < #correct < G; QAE's zeros lie inside such groups
    patterns = torch.tensor([[(i >> j) & 1 for j in range(g)] for i in range(2**g)], dtype=torch.float)
    dapo = (patterns.sum(1) > 0) & (patterns.sum(1) < g)
    r = patterns.flatten()
    for k in (0.05, 0.2, 0.4, 0.5, 0.6, 0.8, 0.95):
        for method in ("paper", "linear"):
            for scale in ("group", "none"):
                adv = group_advantages(r, g, baseline="quantile", k=k, quantile_method=method, scale=scale)
                assert torch.equal(signal_groups(adv, g), dapo), (k, method, scale)
    assert torch.equal(signal_groups(group_advantages(r, g, baseline="mean"), g), dapo)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 0.1, 0.5, 1.0, 7.5]), min_size=4, max_size=4), min_size=1, max_size=6))
def test_signal_means_rewards_not_all_equal_for_any_rewards(groups):
    r = torch.tensor(groups).flatten()
    not_all_equal = torch.tensor([len(set(gr)) > 1 for gr in groups])
    for baseline in ("mean", "quantile"):
        assert torch.equal(signal_groups(group_advantages(r, 4, baseline=baseline, k=0.4), 4), not_all_equal)


def test_signal_refuses_a_batch_that_is_not_whole_groups():
    with pytest.raises(ValueError, match="group_size"):
        signal_groups(torch.zeros(6), 4)


def test_advantage_stats_success_of_the_right_count_in_another_shape_is_refused():
    # success is (N,) bool, one per response: a (B, G) tensor of the right count is another layout, refused by name
    # rather than silently flattened. Planted: `ok.shape != (r.numel(),)` -> `ok.numel() != r.numel()` -> fails
    r = T([1.0, 0, 0, 0, 1, 1, 1, 0])
    a = group_advantages(r, 4, k=0.4)
    with pytest.raises(ValueError, match=r"success must be a bool tensor of shape \(8,\), got torch.bool \(2, 4\)"):
        advantage_stats(r, a, 4, 0.4, success=(r > 0.5).view(2, 4))
