"""qae_lab.regimes: token means split by QAE's regime, the start split of a held-out set, group means."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.reference import ref_regime_token_means, ref_start_split

from qae_lab.regimes import group_means, regime_token_means, regime_token_sums, start_split


def test_regime_token_sums_by_hand():
    # rows 0 and 2 hard; row 1 easy; padding (mask 0) never counts, whatever its value
    x = torch.tensor([[0.5, 1.5, 9.0], [2.0, 4.0, 6.0], [1.0, 9.0, 9.0]])
    m = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    sums = regime_token_sums(x, m, torch.tensor([True, False, True]))
    assert sums.tolist() == [3.0, 3.0, 12.0, 3.0]  # hard: 0.5 + 1.5 + 1.0 over 3 tokens; easy: 12 over 3
    assert regime_token_means(sums) == (1.0, 4.0)
    # every row hard: no easy token, so no easy mean (None, not 0)
    assert regime_token_means(regime_token_sums(x, m, torch.ones(3, dtype=torch.bool))) == (15.0 / 6, None)


def test_regime_token_sums_add_over_processes_as_one_batch():
    # the trainer sums the four numbers over processes before dividing: two halves give the whole batch's means
    g = torch.Generator().manual_seed(0)
    x, m = torch.rand(6, 5, generator=g), (torch.rand(6, 5, generator=g) > 0.3).long()
    hard = torch.tensor([True, False, True, True, False, False])
    whole = regime_token_sums(x, m, hard)
    halves = regime_token_sums(x[:3], m[:3], hard[:3]) + regime_token_sums(x[3:], m[3:], hard[3:])
    # float32 sums of 30 values below 1: the two orders of addition differ by a few ulps of the total (<= 30)
    torch.testing.assert_close(halves, whole, rtol=0, atol=30 * torch.finfo(torch.float32).eps * 30)


@settings(max_examples=60)
@given(st.integers(1, 6), st.integers(1, 7), st.integers(0, 2**31 - 1))
def test_regime_token_means_match_the_loop_reference(b, t, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    m = (torch.rand(b, t, generator=g) > 0.4).long()
    hard = torch.rand(b, generator=g) > 0.5
    got = regime_token_means(regime_token_sums(x, m, hard))
    want = ref_regime_token_means(x.tolist(), m.tolist(), hard.tolist())
    for a, w in zip(got, want):
        # float64 sums of at most 42 values below 3: agreement to 1e-12 relative is far above the rounding
        assert (a is None and w is None) or a == pytest.approx(w, rel=1e-12)
    # the two regimes' means, weighted by their token counts, give the whole batch's mean (TRL's entropy)
    sums = regime_token_sums(x, m, hard)
    if float(sums[1] + sums[3]) > 0:
        whole = float((x * m).sum() / m.sum())
        assert float((sums[0] + sums[2]) / (sums[1] + sums[3])) == pytest.approx(whole, rel=1e-12)


def test_regime_token_sums_refuses_bad_shapes():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="hard_rows must be a bool tensor of shape"):
        regime_token_sums(x, torch.ones(2, 3), torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="hard_rows"):
        regime_token_sums(x, torch.ones(2, 3), torch.tensor([True]))
    with pytest.raises(ValueError, match="mask must have shape"):
        regime_token_sums(x, torch.ones(2, 2), torch.tensor([True, False]))
    with pytest.raises(ValueError, match="4 numbers"):
        regime_token_means([1.0, 2.0])


@pytest.mark.parametrize(
    "x, hard, match",
    [
        # not a tensor: the message names its type
        ([[1.0, 2.0, 3.0]] * 2, [True, False], r"^x must be a floating \(B, T\) tensor, got list$"),
        # 1-D / integer: the message shows the shape
        (torch.zeros(2), [True, False], r"^x must be a floating \(B, T\) tensor, got torch\.Size\(\[2\]\)$"),
        (
            torch.zeros(2, 3, dtype=torch.long),
            [True, False],
            r"^x must be a floating \(B, T\) tensor, got torch\.Size\(\[2, 3\]\)$",
        ),
        # B = 2 rows, not T = 3
        (torch.zeros(2, 3), [True], r"^hard_rows must be a bool tensor of shape \(2,\), got torch\.bool \(1,\)$"),
    ],
)
def test_regime_token_sums_errors_name_the_argument(x, hard, match):
    # bad input gets a ValueError naming the argument and, for hard_rows, the batch size B (not the length T).
    # Planted: `... or x.dim() != 2 and not x.is_floating_point()` -> the integer x passes;
    # `not isinstance(x, Tensor) and x.dim() != 2 or ...` -> the list raises AttributeError, the 1-D x passes;
    # `({x.shape[1]},)` in the hard_rows message -> fails.
    # The whole message is matched (what the user reads). Planted in the x message: getattr(None, 'shape', ...),
    # getattr(x, 'XXshapeXX' | 'SHAPE', ...) (1-D x says "Tensor"), getattr(x, 'shape', None) or
    # type(None).__name__ (a list says "None" / "NoneType") -> fails
    mask = torch.ones(x.shape if isinstance(x, torch.Tensor) else (2, 3))
    with pytest.raises(ValueError, match=match):
        regime_token_sums(x, mask, torch.tensor(hard))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_regime_token_sums_keep_x_dtype(dtype):
    # the four numbers come back in x's dtype (the trainer upcasts bf16 itself): small sums, exact in half precision.
    # Planted: `check_mask(mask, x.shape).to(None)` (a float32 mask) -> the sums come back float32 -> fails
    x = torch.tensor([[0.5, 1.5, 9.0], [2.0, 4.0, 6.0]], dtype=dtype)
    sums = regime_token_sums(x, torch.tensor([[1, 1, 0], [1, 1, 1]]), torch.tensor([True, False]))
    assert sums.dtype == dtype
    assert sums.tolist() == [2.0, 2.0, 12.0, 3.0]


def test_start_split_by_hand_ties_go_to_the_first_prompt():
    rates = [0.25, 0.0, 0.25, 1.0, 0.75, 1.0, 0.0, 0.5]
    assert start_split(rates, 0.25) == ([1, 6], [3, 5])
    assert start_split(rates, 0.375) == ([0, 1, 6], [3, 4, 5])  # three each: the first 0.25 (prompt 0) goes in
    assert start_split([0.5, 0.5], 0.5) == ([0], [0])  # every rate equal: both groups take the first prompt
    assert start_split([0.2, 0.4, 0.6], 0.1) == ([0], [2])  # at least one prompt each


@settings(max_examples=80)
@given(st.lists(st.sampled_from([i / 8 for i in range(9)]), min_size=2, max_size=40), st.floats(0.01, 0.5))
def test_start_split_matches_the_loop_reference(rates, frac):
    hard, easy = start_split(rates, frac)
    assert (hard, easy) == ref_start_split(rates, frac)
    # every hard prompt is at most as successful as every prompt left out of the hard group
    others = [rates[i] for i in range(len(rates)) if i not in hard]
    assert not others or max(rates[i] for i in hard) <= min(others)


@pytest.mark.parametrize(
    "rates, frac, name",
    [
        ([0.5], 0.25, "success_rates"),
        ([0.5, 1.5], 0.25, "success_rates"),
        ([0.5, math.nan], 0.25, "success_rates"),
        ([0.5, 0.5], 0.0, "frac"),
        ([0.5, 0.5], 0.6, "frac"),
        ([0.5, 0.5], True, "frac"),
        # not a real number, even one float() reads; Planted: `isinstance(frac, bool) and not isinstance(frac,
        # numbers.Real) or ...` -> "0.25" is accepted, None raises TypeError -> fails
        ([0.5, 0.5], "0.25", "frac"),
        ([0.5, 0.5], None, "frac"),
    ],
)
def test_start_split_refuses(rates, frac, name):
    with pytest.raises(ValueError, match=name):
        start_split(rates, frac)


def test_group_means_match_a_loop_over_completions():
    g = torch.Generator().manual_seed(3)
    b, group, t = 5, 3, 6
    x = torch.rand(b * group, t, generator=g)
    lengths = torch.randint(1, t + 1, (b * group,), generator=g)
    m = (torch.arange(t)[None, :] < lengths[:, None]).float()  # right-padded
    r = (torch.rand(b * group, generator=g) > 0.5).float()
    groups = {"hard": [0, 3], "easy": [4], "all": list(range(b))}
    got = group_means(x, m, r, group, groups)
    for name, prompts in groups.items():
        rows = [i * group + j for i in prompts for j in range(group)]
        tokens = [float(x[i, s]) for i in rows for s in range(t) if m[i, s]]
        # float64 sums of float32 values: the two orders agree far below float32's own rounding
        assert got[name][0] == pytest.approx(sum(tokens) / len(tokens), rel=1e-9)
        assert got[name][1] == sum(float(r[i]) for i in rows) / len(rows)


def test_group_means_refuses():
    x, m, r = torch.zeros(4, 2), torch.ones(4, 2), torch.zeros(4)
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_means(x, m, r, 3, {"a": [0]})
    with pytest.raises(ValueError, match=r"groups\['a'\] must name prompts in 0..1"):
        group_means(x, m, r, 2, {"a": [2]})
    with pytest.raises(ValueError, match=r"groups\['a'\]"):
        group_means(x, m, r, 2, {"a": []})


@pytest.mark.parametrize(
    "x, rewards, group_size, groups, match",
    [
        # not a tensor: the message names its type; 1-D: it shows the shape
        ([[0.0, 0.0]] * 4, torch.zeros(4), 2, {"a": [0]}, r"^x must be an \(N, T\) tensor, got list$"),
        (torch.zeros(4), torch.zeros(4), 2, {"a": [0]}, r"^x must be an \(N, T\) tensor, got torch\.Size\(\[4\]\)$"),
        (torch.zeros(4, 2), torch.zeros(4), 0, {"a": [0]}, r"^group_size must be an int >= 1, got 0$"),
        (torch.zeros(4, 2), torch.zeros(4), 2, {"a": [-1]}, r"^groups\['a'\] must be an int >= 0, got -1$"),
        (
            torch.zeros(4, 2),
            torch.zeros(3),
            2,
            {"a": [0]},
            r"^rewards must have shape \(4,\) and N = 4 must be a multiple of group_size 2, got \(3,\)$",
        ),
        # N = 3 rows of T = 2: not a multiple of G = 2 (T is)
        (
            torch.zeros(3, 2),
            torch.zeros(3),
            2,
            {"a": [0]},
            r"^rewards must have shape \(3,\) and N = 3 must be a multiple of group_size 2, got \(3,\)$",
        ),
    ],
)
def test_group_means_errors_name_the_argument(x, rewards, group_size, groups, match):
    # bad input gets a ValueError naming the argument, with N (rows) not T (tokens) in the shape message.
    # Planted: `not isinstance(x, Tensor) and x.dim() != 2` -> AttributeError / the 1-D x passes;
    # check_int(group_size, None | "XXgroup_sizeXX" | "GROUP_SIZE", 1) and check_int(i, None, 0) -> the name is lost;
    # `x.shape[1] % g` -> (3, 2) passes the check and fails in view (RuntimeError); `({x.shape[1]},)` or
    # `N = {x.shape[1]}` in the message -> fails.
    # The whole message is matched (what the user reads). Planted in the x message: getattr(None, 'shape', ...),
    # getattr(x, 'XXshapeXX' | 'SHAPE', ...) (1-D x says "Tensor"), getattr(x, 'shape', None) or
    # type(None).__name__ (a list says "None" / "NoneType") -> fails
    mask = torch.ones(x.shape if isinstance(x, torch.Tensor) else (4, 2))
    with pytest.raises(ValueError, match=match):
        group_means(x, mask, rewards, group_size, groups)


def test_group_means_by_hand_one_completion_per_prompt():
    # G = 1 is allowed; a group with one token gives that token, a group with none NaN (not a crash)
    x = torch.tensor([[2.0, 7.0], [5.0, 9.0], [1.0, 1.0]])
    m = torch.tensor([[1, 0], [0, 0], [1, 1]])
    groups = {"one": [0], "none": [1], "two": [2], "all": [0, 1, 2]}
    got = group_means(x, m, torch.tensor([1.0, 0.0, 1.0]), 1, groups)
    assert got["one"] == (2.0, 1.0)
    assert math.isnan(got["none"][0]) and got["none"][1] == 0.0
    assert got["two"] == (1.0, 1.0)
    assert got["all"] == ((2.0 + 1.0 + 1.0) / 3, 2 / 3)
    # Planted: check_int(group_size, "group_size", 2) -> G = 1 refused; `n_tok > 1` -> "one" is NaN;
    # `n_tok >= 0` or `(n_tok > 0) or True` -> ZeroDivisionError on "none" -> fails


def test_group_means_success_rate_exact_for_bfloat16_rewards():
    # the success rate counts in float64 whatever the rewards' dtype: 299 of 300 in bfloat16, whose integers are
    # exact only up to 256 (299 would round to 298 or 300). Planted: `torch.as_tensor(rewards)` (dtype kept) -> fails
    rewards = torch.ones(300, dtype=torch.bfloat16)
    rewards[0] = 0
    got = group_means(torch.zeros(300, 1), torch.ones(300, 1), rewards, 3, {"all": list(range(100))})
    assert got["all"] == (0.0, 299 / 300)


def test_group_means_token_count_past_float32_integers():
    # 2**24 + 1 tokens (e.g. 512 prompts x 8 completions x 4096 tokens, plus one): float32 cannot count them, the
    # float64 count can, so the mean of ones is exactly 1 (about 0.5 s; x and mask are expanded views).
    # Planted: `check_mask(mask, x.shape).to(None)` (a float32 count) -> 1 + 2**-24 -> fails
    n = 2**24 + 1
    x = torch.ones(1, 1, dtype=torch.float64).expand(1, n)
    m = torch.ones(1, 1, dtype=torch.bool).expand(1, n)
    assert group_means(x, m, torch.ones(1), 1, {"a": [0]}) == {"a": (1.0, 1.0)}
