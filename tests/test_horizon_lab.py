"""qae_lab.horizon_lab: notebook 03's numbers on rollouts, against hand-computed groups."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from qae_lab.horizon_lab import (
    alpha_sweep,
    both_weights,
    digit_line,
    discount_lines,
    discount_sweep,
    discounted,
    effective_line,
    entropy_by_position,
    group_rows,
    last_token_weight,
    last_weight_lines,
    paper_share_k,
    summary_03,
    token_grid,
    token_texts,
    top_k_entropies,
    top_k_lines,
)

TOK = SimpleNamespace(decode=lambda ids: ["7", "+", "\n", "x"][ids[0]])


def _rollouts():
    # B = 2 prompts x G = 4: prompt 0 has 1 correct (hard at K = 0.4), prompt 1 has 3 (easy)
    rewards = torch.tensor([1., 0, 0, 0, 1, 1, 1, 0])
    mask = torch.tensor([[1., 1, 1]] * 4 + [[1., 1, 0]] * 4)
    return SimpleNamespace(rewards=rewards, mask=mask, group_size=4, lengths=mask.sum(1),
                           success_counts=rewards.view(2, 4).sum(1))


def test_rows_grid_and_texts():
    assert group_rows(3, 1) == [3, 4, 5]
    values = torch.tensor([[0.5, 0.25, 0.125], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1., 1, 0], [1, 0, 0]])
    assert token_grid(values, mask, [1])[0] == [1.0]  # cut at the longest of the rows asked for
    grid = token_grid(values, mask, [0, 1])
    assert grid[0] == [0.5, 0.25] and grid[1][0] == 1.0 and math.isnan(grid[1][1])
    ids = torch.tensor([[0, 2, 3], [1, 3, 3]])
    assert token_texts(TOK, ids, mask, [0, 1]) == [["7", "⏎"], ["+", ""]]


def test_entropy_by_position_and_digits():
    h = torch.tensor([[0.5, 0.25, 0.0], [0.25, 0.0, 0.0]])
    mask = torch.tensor([[1., 1, 0], [1, 0, 0]])
    assert entropy_by_position(h, mask) == [0.375, 0.25, 0.0]  # position 2: nobody, 0 / max(0, 1)
    ids = torch.tensor([[0, 1, 3], [0, 3, 3]])  # "7", "+" and "7" are real; two of three are digits
    assert digit_line(h, ids, mask, TOK) == ("digit tokens are 67% of the tokens and carry 75% of the summed "
                                             "entropy")  # (0.5 + 0.25) / (0.5 + 0.25 + 0.25)


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
    assert list(curves) == ["effective tokens: AH", "effective tokens: SA-AH, mean baseline",
                            "effective tokens: SA-AH, QAE K=0.4", "mean w on A<0 tokens"]
    assert all(c[0] == 1.0 for c in curves.values())  # alpha 0: no discount
    d = (math.exp(-0.5) + math.exp(-1.0)) / 2
    assert curves["effective tokens: AH"][1] == pytest.approx(d)
    assert curves["effective tokens: SA-AH, mean baseline"][1] == pytest.approx((1 + d) / 2)
    assert effective_line(curves, [0.0, 1.0], 1.0) == (
        f"effective token fraction at α = 1: AH {d:.3f}, SA-AH, mean baseline {(1 + d) / 2:.3f}, "
        f"SA-AH, QAE K=0.4 {(1 + d) / 2:.3f}")
    with pytest.raises(ValueError):
        effective_line(curves, [0.0, 1.0], 0.5)  # not swept


def test_last_token_weight_by_hand():
    assert last_token_weight(0.029, 243) == pytest.approx(math.exp(-0.5 * 243 * 0.029), rel=1e-6)
    lines = last_weight_lines(torch.tensor([[0.1, 0.3, 0.0], [0.2, 0.0, 0.0]]), torch.tensor([[1., 1, 0], [1, 0, 0]]),
                              alpha=1.0)
    # mean H~ over the 3 real tokens 0.2; mean length 1.5 rounds to 2: w = exp(-1 * 2 * 0.2)
    assert lines[2] == f"this run (mean H~ 0.2000, 2 tokens): last token's w = {math.exp(-0.4):.3f}"
    assert lines[0].startswith("paper, Qwen2.5-3B early (mean H~ 0.029, 243 tokens)")
    with pytest.raises(ValueError, match="n_tokens"):
        last_token_weight(0.1, 0)


def test_top_k_by_hand():
    assert [paper_share_k(v) for v in (151_936, 303_872, 1000)] == [500, 1000, 3]
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]]]))
    exact, est = top_k_entropies(logits, torch.tensor([[1., 0]]), 3)
    assert exact.shape == (1,) and torch.allclose(exact, est)  # k >= V: the estimate is exact
    err = {"k": [1, 2], "mean_abs": [0.3, 0.1], "max_abs": [0.5, 0.2], "mean_signed": [-0.3, 0.1],
           "tail_mass": [0.4, 0.1]}
    [line] = top_k_lines(err, 600)  # the paper's share of 600 is k = 2; k = 500 was not tried
    assert "the same share of ours is k = 2: mean error 0.1000 (the estimate lies above" in line


def test_discounted_under_each_baseline():
    ro, h = _rollouts(), torch.full((8, 3), 0.5)
    q = discounted(ro, h, 0.4, "quantile", 1.0)
    assert q["touched"] == [7] and q["in_hard"] == [] and q["hard"].tolist() == [True, False]
    assert q["w_row"].shape == (2, 4) and q["w_row"][0].tolist() == [1.0] * 4  # nobody discounted in prompt 0
    m = discounted(ro, h, 0.4, "mean", 1.0)
    assert m["touched"] == [1, 2, 3, 7] and m["in_hard"] == [1, 2, 3]  # every failure of a mixed group


def test_discount_sweep_and_lines():
    ro = _rollouts()
    # K = 0.2: prompt 1 (p = 0.75 <= 0.8) is hard too, so QAE discounts nobody; K = 0.8: prompt 0 (p = 0.25 > 0.2)
    # turns easy and its three failures are discounted
    sweep = discount_sweep(ro, [0.2, 0.4, 0.8])
    assert sweep == {"QAE: discounted": [0, 1, 4], "QAE: easy-group failures": [0, 1, 4],
                     "QAE: discounted in hard groups": [0, 0, 0], "mean baseline: discounted": [4, 4, 4]}
    assert discount_lines(ro, sweep) == [
        "4 failures of 8 rollouts; the mean baseline discounts 4",
        "QAE discounts exactly the easy-group failures at every K of the sweep: True; in hard groups: max 0"]


def test_summary_03_states_entropy_effective_tokens_and_discounts():
    h = torch.tensor([[0.5, 0.1, 0.0], [0.2, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # 3 real tokens: H~ 0.5, 0.1, 0.2
    curves = {"effective tokens: AH": [1.0, 0.6, 0.3], "effective tokens: SA-AH, mean baseline": [1.0, 0.8, 0.5],
              "mean w on A<0 tokens": [1.0, 0.4, 0.2]}
    sweep = {"QAE: discounted": [2, 0, 1], "QAE: discounted in hard groups": [0, 0, 0],
             "mean baseline: discounted": [1, 1, 1]}
    text = summary_03(h, mask, torch.tensor([0.0, 1.0]), curves, [0.0, 0.5, 1.0], sweep, [0.2, 0.5, 0.8])
    assert all(len(line) <= 110 for line in text.splitlines())
    bullets = " ".join(text.split()).split("* ")[1:]  # wrapping undone
    assert bullets == [
        "2 completions, success rate 0.50; mean H~_t 0.2667 over 3 real tokens, largest 0.500. ",
        "effective token fraction at α = 0.5: AH 0.600, SA-AH, mean baseline 0.800; at α = 1: AH 0.300, "
        "SA-AH, mean baseline 0.500. ",
        "QAE discounted 0 to 2 rollouts over K = 0.2 .. 0.8 (the mean baseline 1), 0 of them in hard groups."]
    with pytest.raises(ValueError, match="mask"):
        summary_03(h, torch.zeros_like(mask), torch.tensor([0.0, 1.0]), curves, [0.0, 0.5, 1.0], sweep, [0.2])
