"""qae_lab.horizon_figures: notebook 03's figures, checked against hand-computed groups."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from qae_lab.horizon_figures import entropy_figure, topk_figure, touched_figure, weights_figure


def _rollouts():
    rewards = torch.tensor([1., 0, 0, 0, 1, 1, 1, 0])
    mask = torch.tensor([[1., 1, 1]] * 4 + [[1., 1, 0]] * 4)
    return SimpleNamespace(rewards=rewards, mask=mask, group_size=4, lengths=mask.sum(1),
                           success_counts=rewards.view(2, 4).sum(1), completion_ids=torch.zeros(8, 3, dtype=torch.long),
                           records=[{"question": "1 + 2 + 3?", "gold": "6"}, {"question": "4 + 5?", "gold": "9"}])


def test_entropy_figure_of_a_group():
    ro = _rollouts()
    h = torch.arange(24, dtype=torch.float64).view(8, 3) / 100
    fig = entropy_figure(ro, h, SimpleNamespace(decode=lambda ids: "0"), 1)
    hm = fig.data[0]
    assert list(hm.y) == ["y1 ✓", "y2 ✓", "y3 ✓", "y4 ✗"] and list(hm.x) == [0, 1]  # prompt 1's rows are 2 long
    assert list(hm.z[0]) == [0.12, 0.13] and hm.zmax == 0.22  # the largest real H~ (0.23 sits on padding)
    assert fig.layout.title.text == "H~_t, prompt 1: 4 + 5? (gold 9, 3/4 correct)"


def test_weights_figure_rows_and_meta():
    ro = _rollouts()
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -1.5])
    fig = weights_figure(ro, torch.full((8, 3), 0.5), adv, 1.0, 1)
    hm = fig.data[0]
    assert list(hm.y)[3] == "SA-AH · y4 ✗ A=-1.50" and list(hm.y)[4] == "AH · y1 ✓ A=+0.50"
    assert list(hm.z[0]) == [1.0, 1.0] and list(hm.z[3]) == pytest.approx([math.exp(-0.5), math.exp(-1.0)])
    assert list(hm.z[4]) == list(hm.z[3])  # AH discounts the success alike
    meta = fig.layout.meta
    assert meta["alpha"] == 1.0 and meta["saah"]["w_mean_neg"] == meta["ah"]["w_mean_neg"]
    assert meta["ah"]["effective_tokens_frac"] < meta["saah"]["effective_tokens_frac"]
    assert fig.layout.yaxis.autorange == "reversed"


def test_topk_figure_exact_at_full_vocabulary():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.8, 0.1, 0.1]]]))
    fig = topk_figure(logits, torch.ones(1, 2), 3)
    est, diagonal = fig.data
    assert list(est.x) == list(est.y) and est.mode == "markers"
    assert list(diagonal.x) == [0, max(est.x)] and diagonal.name == "exact"
    assert "2 tokens (mean |error| 0.00e+00)" in fig.layout.title.text
    assert "mean |error| 0.00e+00" not in topk_figure(logits, torch.ones(1, 2), 1).layout.title.text


def test_touched_figure_marks_only_the_discounted():
    ro = _rollouts()
    fig = touched_figure(ro, torch.full((8, 3), 0.5), 0.4, "mean", 1.0)
    hm = fig.data[0]
    assert list(hm.y) == ["prompt 0: p=1/4 hard", "prompt 1: p=3/4 easy"]
    assert fig.layout.meta["touched"] == [1, 2, 3, 7] and fig.layout.meta["in_hard"] == [1, 2, 3]
    assert list(hm.z[0])[0] == 1.0 and list(hm.z[1])[:3] == [1.0, 1.0, 1.0]  # the successes keep w = 1
    assert list(hm.text[1]) == ["✓", "✓", "✓", "✗"]
    assert fig.layout.title.text.startswith("mean baseline, K = 0.4, α = 1: 4 of 8 rollouts discounted, 3 of them")
