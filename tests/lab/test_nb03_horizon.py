"""qae_lab.lab.nb03_horizon: notebook 03's numbers on rollouts, against hand-computed groups."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from qae_lab.lab.nb03_horizon import (
    alpha_sweep,
    baseline_line,
    both_weights,
    discounted,
    discounted_tokens,
    effective_line,
    group_rows,
    group_weights,
    pick_group,
    summary_03,
    token_grid,
    token_texts,
    uncertain_line,
    weights_line,
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
    assert effective_line(curves, [0.0, 1.0], 1.0) == (
        f"effective token fraction at α = 1: AH {d:.3f}, SA-AH, mean baseline {(1 + d) / 2:.3f}, "
        f"SA-AH, QAE K=0.4 {(1 + d) / 2:.3f}"
    )
    with pytest.raises(ValueError):
        effective_line(curves, [0.0, 1.0], 0.5)  # not swept


def test_discounted_under_each_baseline():
    ro, h = _rollouts(), torch.full((8, 3), 0.5)
    q = discounted(ro, h, 0.4, "quantile", 1.0)
    assert q["touched"] == [7] and q["in_hard"] == [] and q["hard"].tolist() == [True, False]
    assert q["w_row"].shape == (2, 4) and q["w_row"][0].tolist() == [1.0] * 4  # nobody discounted in prompt 0
    m = discounted(ro, h, 0.4, "mean", 1.0)
    assert m["touched"] == [1, 2, 3, 7] and m["in_hard"] == [1, 2, 3]  # every failure of a mixed group


def test_pick_group_takes_the_median_mixed_group():
    # G = 2, five prompts: 0, 2 and 4 mixed (rows 1, 5 and 9 fail), 1 all right, 3 all wrong
    rewards = torch.tensor([1.0, 0, 1, 1, 1, 0, 0, 0, 1, 0])
    ro = SimpleNamespace(
        rewards=rewards, group_size=2, mask=torch.ones(10, 2), success_counts=rewards.view(5, 2).sum(1)
    )
    h = torch.zeros(10, 2)
    h[1], h[5], h[9] = 0.5, 0.1, 0.9  # the failures' H~: their mean w at alpha 0.5 is 0.69, 0.93 and 0.52
    h[6:8] = 1.0  # prompt 3 is the most uncertain but not mixed: never chosen
    assert pick_group(ro, h) == 0  # sorted 0.52 (4), 0.69 (0), 0.93 (2): the middle one
    assert pick_group(ro, h, alpha=0.0) == 2  # every weight 1: ties broken by the prompt's index, the lower median
    h[5] = 0.7  # prompt 2's failure (mean w 0.60) now sits between the other two
    assert pick_group(ro, h) == 2
    two = SimpleNamespace(
        rewards=rewards[:6], group_size=2, mask=torch.ones(6, 2), success_counts=rewards[:6].view(3, 2).sum(1)
    )
    assert pick_group(two, h[:6]) == 2  # two mixed groups (0: 0.69, 2: 0.60): the lower of the two
    none = SimpleNamespace(
        rewards=torch.tensor([1.0, 1, 0, 0]), group_size=2, mask=torch.ones(4, 2), success_counts=torch.tensor([2.0, 0])
    )
    with pytest.raises(ValueError, match="both successes and failures"):
        pick_group(none, torch.zeros(4, 2))


def test_group_weights_and_their_line_by_hand():
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
    assert weights_line(out, 1, 1.0) == (
        f"At α = 1, SA-AH's mean weight on the tokens of prompt 1's 1 rollouts with A < 0 is {neg:.2f} (their last "
        f"tokens {last:.2f}); its 3 others keep 1, where AH gives them {out['AH']['pos']:.2f}."
    )
    none = group_weights(h, ro.mask, torch.ones(8), 1.0, group_rows(4, 1))  # no A < 0: nothing discounted
    assert none["SA-AH"]["neg"] == none["SA-AH"]["last_neg"] == 1.0 and none["SA-AH"]["n_neg"] == 0


def test_uncertain_line():
    assert uncertain_line([("First", 0.2764, 13), ("7", 0.05, 84)]) == (
        "most uncertain steps (mean H~_t of the step that drew the token, times drawn): 'First' 0.28 x13, '7' 0.05 x84"
    )


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


def test_baseline_line_states_the_regime_and_the_batch():
    counts = {
        "mean": [9, 2, 0, 5],
        "quantile": [0, 2, 0, 0],
        "correct": [1, 3, 4, 2],
        "hard": [True, False, False, True],
        "k": 0.4,
    }
    assert baseline_line(counts, 1, 4) == (
        "Prompt 1 has 3/4 correct: easy at K = 0.4, so QAE, like the mean, gives every failure A < 0 and discounts 2 "
        "of its tokens, the mean baseline 2. Of this batch's 3 groups with both successes and failures, QAE "
        "discounted fewer tokens on 2 (hard) and the same on 1 (easy): the answer depends on the group."
    )
    hard_only = {**counts, "mean": [9, 0, 0, 5], "correct": [1, 4, 4, 2]}  # prompt 1 all right: not mixed
    line = baseline_line(hard_only, 0, 4)
    assert line.startswith(
        "Prompt 0 has 1/4 correct: hard at K = 0.4, so QAE gives its failures A = 0 and "
        "discounts 0 of its tokens, the mean baseline 9."
    )
    assert line.endswith(
        "fewer tokens on 2 (hard) and the same on 0: on this batch the answer is the same "
        "for every such group, but an easy group would give the other."
    )
    flat = {**counts, "mean": [0, 2, 0, 5]}  # prompt 0's failures had no entropy: 0 tokens either way, yet hard
    assert "fewer tokens on 1 (hard) and the same on 2: the answer depends" in baseline_line(flat, 1, 4)
    easy_only = {"mean": [2], "quantile": [2], "correct": [3], "hard": [False], "k": 0.4}
    assert baseline_line(easy_only, 0, 4).endswith("but a hard group would give the other.")


def test_summary_03_states_the_group_the_batch_and_the_counts():
    ro = _rollouts()
    h = torch.tensor([[0.5, 0.1, 0.0]] + [[0.2, 0.0, 0.0]] * 7)  # mean over the 20 real tokens: 2.0 / 20
    stats = {
        "SA-AH": {"neg": 0.58, "pos": 1.0, "n_neg": 5, "n_pos": 3, "last_neg": 0.314},
        "AH": {"neg": 0.58, "pos": 0.7412, "n_neg": 5, "n_pos": 3, "last_neg": 0.314},
    }
    curves = {
        "effective tokens: AH": [1.0, 0.6, 0.3],
        "effective tokens: SA-AH, mean baseline": [1.0, 0.8, 0.5],
        "mean w on A<0 tokens": [1.0, 0.4, 0.2],
    }
    counts = {"mean": [9, 2], "quantile": [0, 2], "correct": [1, 3], "hard": [True, False], "k": 0.4}
    text = summary_03(ro, h, 1, stats, curves, [0.0, 0.5, 1.0], counts)
    assert all(len(line) <= 110 for line in text.splitlines())
    bullets = " ".join(text.split()).split("* ")[1:]  # wrapping undone
    assert bullets == [
        "2 x 4 completions, success rate 0.50; mean H~_t 0.100 over 20 tokens, largest 0.500. ",
        "Prompt 1 at α = 0.5: SA-AH's mean weight on its 5 rollouts with A < 0 is 0.58 (last tokens 0.31); its 3 "
        "others keep 1 (AH: 0.74). ",
        "The batch's effective token fraction at α = 0.5: AH 0.600, SA-AH, mean baseline 0.800. ",
        "Tokens discounted in the batch: mean baseline 11, QAE K = 0.4 2.",
    ]
    with pytest.raises(ValueError):
        summary_03(ro, h, 1, stats, curves, [0.0, 1.0], counts)  # alpha 0.5 was not swept
