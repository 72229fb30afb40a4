"""qae_lab.lab.notebooks.nb03_horizon: notebook 03's numbers on rollouts, against hand-computed groups."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from qae_lab.lab.notebooks.nb03_horizon import (
    alpha_sweep,
    batch_rows,
    both_weights,
    discount_rows,
    discounted,
    discounted_tokens,
    group_rows,
    group_weights,
    pick_group,
    token_grid,
    token_texts,
    uncertain_rows,
    weights_rows,
)

TOK = SimpleNamespace(decode=lambda ids: ["7", "+", "\n", "x"][ids[0]])


def _rollouts():
    # B = 2 prompts x G = 4: prompt 0 has 1 correct (hard at K = 0.4), prompt 1 has 3 (easy)
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0])
    mask = torch.tensor([[1.0, 1, 1]] * 4 + [[1.0, 1, 0]] * 4)
    return SimpleNamespace(
        rewards=rewards, mask=mask, group_size=4, lengths=mask.sum(1), success_counts=rewards.view(2, 4).sum(1)
    )


def test_rows_grid_and_texts():
    assert group_rows(3, 1) == [3, 4, 5]
    values = torch.tensor([[0.5, 0.25, 0.125], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1, 0], [1, 0, 0]])
    assert token_grid(values, mask, [1])[0] == [1.0]  # cut at the longest of the rows asked for
    grid = token_grid(values, mask, [0, 1])
    assert grid[0] == [0.5, 0.25] and grid[1][0] == 1.0 and math.isnan(grid[1][1])
    ids = torch.tensor([[0, 2, 3], [1, 3, 3]])
    assert token_texts(TOK, ids, mask, [0, 1]) == [["7", "⏎"], ["+", ""]]


def test_both_weights_by_hand():
    h, mask, adv = torch.full((2, 2), 0.5), torch.ones(2, 2), torch.tensor([0.5, -0.5])
    out = both_weights(h, mask, adv, 1.0)
    w_sa, s_sa = out["SA-AH"]
    w_ah, s_ah = out["AH"]
    discount = [math.exp(-0.5), math.exp(-1.0)]  # w_t = exp(-alpha * sum_{s<=t} H~_s)
    assert w_sa[0].tolist() == [1.0, 1.0] and w_sa[1].tolist() == pytest.approx(discount)
    assert w_ah[0].tolist() == pytest.approx(discount)  # AH discounts successes too
    assert s_sa["w_mean_neg"] == pytest.approx(sum(discount) / 2)
    assert s_ah["effective_tokens_frac"] == pytest.approx(sum(discount) / 2)
    assert s_sa["effective_tokens_frac"] == pytest.approx((2 + sum(discount)) / 4)  # the success keeps w = 1


def test_alpha_sweep_and_its_line():
    h, mask = torch.full((2, 2), 0.5), torch.ones(2, 2)
    curves = alpha_sweep(h, mask, torch.tensor([0.5, -0.5]), torch.tensor([0.0, -1.0]), [0.0, 1.0])
    assert list(curves) == [
        "effective tokens: AH",
        "effective tokens: SA-AH, mean baseline",
        "effective tokens: SA-AH, QAE K=0.4",
        "mean w on A<0 tokens",
    ]
    assert all(c[0] == 1.0 for c in curves.values())  # alpha 0: no discount
    d = (math.exp(-0.5) + math.exp(-1.0)) / 2
    assert curves["effective tokens: AH"][1] == pytest.approx(d)
    assert curves["effective tokens: SA-AH, mean baseline"][1] == pytest.approx((1 + d) / 2)


def test_batch_rows_by_hand():
    ro, h = _rollouts(), torch.full((8, 3), 0.5)  # prompt 0: 1/4 correct, 3 tokens each; prompt 1: 3/4, 2 tokens
    w = [math.exp(-0.5 * t) for t in (1, 2, 3)]  # w_t = exp(-alpha * sum_{s<=t} H~_s) at alpha = 1
    long, short = sum(w), sum(w[:2])  # sum(w) over a rollout of prompt 0, and of prompt 1
    rows = batch_rows(ro, h, alpha=1.0)
    assert [(r["weights"], r["baseline"]) for r in rows] == [
        ("AH", "mean"),
        ("SA-AH", "mean"),
        ("SA-AH", "QAE, K = 0.4"),
    ]
    # AH: all 8 rollouts, 20 tokens; SA-AH, mean: the failures of both mixed groups, rows 1-3 and 7;
    # SA-AH, QAE: prompt 0 is hard (its failures get A = 0), prompt 1 easy: row 7 only
    assert [(r["rollouts discounted"], r["tokens discounted"]) for r in rows] == [(8, 20), (4, 11), (1, 2)]
    fractions = [
        (4 * long + 4 * short) / 20,
        (3 * long + short + 3 + 3 * 2) / 20,  # row 0 (3 tokens) and rows 4-6 (2 each) keep w = 1
        (4 * 3 + 3 * 2 + short) / 20,
    ]
    assert [r["effective token fraction"] for r in rows] == pytest.approx(fractions, abs=1e-6)  # float32 weights
    assert all(r["tokens discounted"] == 0 for r in batch_rows(ro, h, alpha=0.0))  # alpha 0: plain GRPO


def test_discounted_under_each_baseline():
    ro, h = _rollouts(), torch.full((8, 3), 0.5)
    q = discounted(ro, h, 0.4, "quantile", 1.0)
    assert q["touched"] == [7] and q["in_hard"] == [] and q["hard"].tolist() == [True, False]
    assert q["w_row"].shape == (2, 4) and q["w_row"][0].tolist() == [1.0] * 4  # nobody discounted in prompt 0
    m = discounted(ro, h, 0.4, "mean", 1.0)
    assert m["touched"] == [1, 2, 3, 7] and m["in_hard"] == [1, 2, 3]  # every failure of a mixed group


def _groups(counts, g=8):
    """Rollouts of len(counts) prompts x G, prompt b's first counts[b] rows correct; two tokens each."""
    rewards = torch.tensor([float(j < c) for c in counts for j in range(g)])
    n = len(rewards)
    return SimpleNamespace(
        rewards=rewards, group_size=g, mask=torch.ones(n, 2), success_counts=torch.tensor([float(c) for c in counts])
    )


def test_pick_group_takes_the_median_clearly_hard_mixed_group():
    # G = 8: hard at K = 0.6 while c <= 8 - ceil(4.8) = 3; c = 4 and 5 sit next to K = 0.4's boundary (c <= 4)
    ro = _groups([2, 5, 4, 1, 0, 3, 8, 7])
    h = torch.zeros(64, 2)
    for b, level in ((0, 0.5), (1, 0.9), (2, 0.9), (3, 0.1), (5, 0.7), (7, 1.0)):
        h[8 * b : 8 * b + 8] = level  # the failures' mean w at alpha 0.5: (exp(-level / 2) + exp(-level)) / 2
    assert pick_group(ro, h) == 0  # prompts 0, 3 and 5 qualify, mean w 0.69, 0.93 and 0.60: the middle one
    h[40:48] = 0.2  # prompt 5's failures at 0.86 now: 0.69 (0), 0.86 (5), 0.93 (3)
    assert pick_group(ro, h) == 5
    assert pick_group(ro, h, clear_k=0.4) == 0  # clear_k = K: c = 4 qualifies too, prompt 2 at 0.52: the lower median
    assert pick_group(ro, h, alpha=0.0) == 3  # every weight 1: ties broken by the index (0, 3, 5), the middle one
    with pytest.raises(ValueError, match="hard at K = 0.6"):
        pick_group(_groups([5, 4, 8, 0]), torch.zeros(32, 2))  # mixed groups, but none clearly hard


def test_group_weights_and_their_rows_by_hand():
    ro = _rollouts()
    h = torch.zeros(8, 3)
    h[4:7, :2], h[7, :2] = 0.2, 0.4  # prompt 1: three successes at H~ 0.2, the failure at 0.4, two tokens each
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -1.5])
    out = group_weights(h, ro.mask, adv, 1.0, group_rows(4, 1))
    neg, last = (math.exp(-0.4) + math.exp(-0.8)) / 2, math.exp(-0.8)  # w_t = exp(-alpha sum_{s<=t} H~_s)
    assert out["SA-AH"] == pytest.approx({"neg": neg, "pos": 1.0, "n_neg": 1, "n_pos": 3, "last_neg": last})
    assert out["AH"] == pytest.approx(
        {"neg": neg, "pos": (math.exp(-0.2) + math.exp(-0.4)) / 2, "n_neg": 1, "n_pos": 3, "last_neg": last}
    )  # padding (t = 2) counts nowhere
    rows = weights_rows(out)
    assert [(r["weights"], r["rollouts A < 0"], r["rollouts A ≥ 0"]) for r in rows] == [("SA-AH", 1, 3), ("AH", 1, 3)]
    ah_pos = (math.exp(-0.2) + math.exp(-0.4)) / 2
    for row, pos in zip(rows, (1.0, ah_pos)):
        assert [row["mean w"], row["last token w"], row["their mean w"]] == pytest.approx([neg, last, pos], abs=1e-6)
    none = group_weights(h, ro.mask, torch.ones(8), 1.0, group_rows(4, 1))  # no A < 0: nothing discounted
    assert none["SA-AH"]["neg"] == none["SA-AH"]["last_neg"] == 1.0 and none["SA-AH"]["n_neg"] == 0


def test_uncertain_rows():
    assert uncertain_rows([("First", 0.2764, 13), ("7\n", 0.05, 84)]) == [
        {"token": "`First`", "mean H~_t": 0.2764, "times drawn": 13},
        {"token": "`7⏎`", "mean H~_t": 0.05, "times drawn": 84},
    ]


def test_discounted_tokens_by_hand():
    ro, h = _rollouts(), torch.full((8, 3), 0.5)
    # mean baseline: every failure of both mixed groups, 3 x 3 tokens in prompt 0 and 2 in prompt 1; QAE (K = 0.4,
    # G = 4: hard while c <= 2): prompt 0 is hard, its failures get A = 0; prompt 1 is easy, its failure A < 0
    assert discounted_tokens(ro, h, 1.0) == {
        "mean": [9, 2],
        "quantile": [0, 2],
        "correct": [1, 3],
        "hard": [True, False],
        "k": 0.4,
    }
    h[7, 0] = 0.0  # a first step with no entropy: w_0 = exp(0) = 1, not discounted
    assert discounted_tokens(ro, h, 1.0)["quantile"] == [0, 1]
    assert discounted_tokens(ro, h, 1.0, k=0.8)["quantile"] == [9, 1]  # K = 0.8: prompt 0 turns easy too
    assert discounted_tokens(ro, h, 0.0)["mean"] == [0, 0]  # alpha 0: every weight 1


def test_discount_rows_list_the_mixed_groups_with_their_regime():
    ro, h = _rollouts(), torch.full((8, 3), 0.5)
    rows = discount_rows(discounted_tokens(ro, h, 1.0), 4)
    # by hand (test_discounted_tokens_by_hand): prompt 0 hard, 9 tokens under the mean, none under QAE; prompt 1 easy
    assert rows == [
        {"prompt": 0, "correct": 1, "regime at K = 0.4": "hard", "discounted, mean": 9, "discounted, QAE": 0},
        {"prompt": 1, "correct": 3, "regime at K = 0.4": "easy", "discounted, mean": 2, "discounted, QAE": 2},
    ]
    counts = {"mean": [9, 0, 0, 5], "quantile": [0, 0, 0, 5], "correct": [1, 4, 0, 3], "hard": [1, 0, 1, 0], "k": 0.6}
    assert [(r["prompt"], r["regime at K = 0.6"]) for r in discount_rows(counts, 4)] == [(0, "hard"), (3, "easy")]
