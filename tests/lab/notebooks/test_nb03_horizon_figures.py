"""qae_lab.lab.notebooks.nb03_horizon: notebook 03's figures, checked against hand-computed groups."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from qae_lab.lab.notebooks.nb03_horizon import entropy_figure, touched_figure, weights_figure


def _rollouts():
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0])
    mask = torch.tensor([[1.0, 1, 1]] * 4 + [[1.0, 1, 0]] * 4)
    return SimpleNamespace(
        rewards=rewards,
        mask=mask,
        group_size=4,
        lengths=mask.sum(1),
        success_counts=rewards.view(2, 4).sum(1),
        completion_ids=torch.zeros(8, 3, dtype=torch.long),
        records=[{"question": "1 + 2 + 3?", "gold": "6"}, {"question": "4 + 5?", "gold": "9"}],
    )


def test_entropy_figure_of_a_group():
    ro = _rollouts()
    h = torch.arange(24, dtype=torch.float64).view(8, 3) / 100
    fig = entropy_figure(ro, h, SimpleNamespace(decode=lambda ids: "0"), 1)
    hm = fig.data[0]
    assert list(hm.y) == ["y1 ✓", "y2 ✓", "y3 ✓", "y4 ✗"] and list(hm.x) == [0, 1]  # prompt 1's rows are 2 long
    assert list(hm.z[0]) == [0.12, 0.13] and hm.zmax == 0.22  # the largest real H~ (0.23 sits on padding)
    assert fig.layout.title.text == "H~_t, prompt 1: 4 + 5? (gold 9, 3/4 correct)"


def test_weights_figure_rows_title_and_meta():
    ro = _rollouts()
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -1.5])
    fig = weights_figure(ro, torch.full((8, 3), 0.5), adv, 1.0, 1)
    hm = fig.data[0]
    assert list(hm.y)[3] == "SA-AH · y4 ✗ A=-1.50" and list(hm.y)[4] == "AH · y1 ✓ A=+0.50"
    discount = [math.exp(-0.5), math.exp(-1.0)]  # w_t = exp(-alpha sum_{s<=t} H~_s), two tokens each
    assert list(hm.z[0]) == [1.0, 1.0] and list(hm.z[3]) == pytest.approx(discount)
    assert list(hm.z[4]) == list(hm.z[3])  # AH discounts the success alike
    mean = sum(discount) / 2  # 0.4872: the failure's mean weight, and the successes' under AH
    assert fig.layout.title.text.replace("<br>", " ") == (
        "w_t at α = 1, prompt 1 (top: SA-AH, bottom: AH) · mean w on its 1 rollouts with A < 0: 0.49 · on its 3 "
        "others: SA-AH 1, AH 0.49"
    )
    meta = fig.layout.meta
    assert meta["alpha"] == 1.0 and meta["prompt"] == 1
    assert meta["saah"]["neg"] == pytest.approx(mean) and meta["saah"]["pos"] == 1.0
    assert meta["ah"]["pos"] == pytest.approx(mean) and meta["ah"]["n_pos"] == 3
    assert fig.layout.yaxis.autorange == "reversed"
    flat = weights_figure(ro, torch.full((8, 3), 0.5), adv, 0.0, 1)  # alpha 0: plain GRPO, every weight 1
    assert all(v == 1.0 for row in flat.data[0].z for v in row if v == v)


def test_touched_figure_marks_only_the_discounted():
    ro = _rollouts()
    fig = touched_figure(ro, torch.full((8, 3), 0.5), 0.4, "mean", 1.0)
    hm = fig.data[0]
    assert list(hm.y) == ["prompt 0: p=1/4 hard", "prompt 1: p=3/4 easy"]
    assert fig.layout.meta["touched"] == [1, 2, 3, 7] and fig.layout.meta["in_hard"] == [1, 2, 3]
    assert list(hm.z[0])[0] == 1.0 and list(hm.z[1])[:3] == [1.0, 1.0, 1.0]  # the successes keep w = 1
    assert list(hm.text[1]) == ["✓", "✓", "✓", "✗"]
    assert fig.layout.title.text.startswith("mean baseline, K = 0.4, α = 1: 4 of 8 rollouts discounted, 3 of them")


def test_weights_table_gives_the_numbers_of_the_figure_at_the_same_alpha():
    # the table under the weights figure: made from the same alpha, the same numbers as its title
    from qae_lab.lab.notebooks.nb03_horizon import weights_table

    ro = _rollouts()
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -1.5])
    h = torch.full((8, 3), 0.5)
    for alpha in (0.5, 0.65, 2.0):
        meta = weights_figure(ro, h, adv, alpha, 1).layout.meta
        rows = weights_table(ro, h, adv, alpha, 1)
        assert [(r["α"], r["weights"]) for r in rows] == [(alpha, "SA-AH"), (alpha, "AH")]
        for row, key in zip(rows, ("saah", "ah")):
            assert (row["mean w"], row["their mean w"]) == (meta[key]["neg"], meta[key]["pos"])
    # by hand at alpha = 1: exp(-0.5) and exp(-1.0) on the failure's two tokens
    assert weights_table(ro, h, adv, 1.0, 1)[0]["mean w"] == pytest.approx((math.exp(-0.5) + math.exp(-1.0)) / 2)


def test_weight_figures_keep_one_titled_colour_scale_whatever_the_controls():
    # the colour of a weight means the same at every alpha, K and baseline: [0, 1], white at 1
    ro = _rollouts()
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -1.5])
    for alpha in (0.0, 0.25, 3.0):
        hm = weights_figure(ro, torch.full((8, 3), 0.5), adv, alpha, 1).data[0]
        assert (hm.zmin, hm.zmax, hm.colorbar.title.text) == (0.0, 1.0, "w_t")
        assert hm.colorscale[-1][1] == "rgb(255,245,240)"  # w = 1: (nearly) white
    for k, baseline in ((0.2, "quantile"), (0.8, "mean")):
        hm = touched_figure(ro, torch.full((8, 3), 0.5), k, baseline, 0.5).data[0]
        assert (hm.zmin, hm.zmax, hm.colorbar.title.text) == (0.0, 1.0, "mean w_t")


def test_entropy_figure_labels_fit_and_read():
    # a long completion: the first 24 tokens shown, " First" cut to "Fir…" (never "irst"), its colour bar titled
    ro = _rollouts()
    ro.mask = torch.ones(8, 40)
    ro.completion_ids = torch.zeros(8, 40, dtype=torch.long)
    h = torch.full((8, 40), 0.2)
    h[:, 0] = 0.9  # an unsure first step, the brightest cell
    fig = entropy_figure(ro, h, SimpleNamespace(decode=lambda ids: " First"), 0)
    hm, labels = fig.data
    assert hm.colorbar.title.text == "H~_t" and list(fig.layout.xaxis.range) == [-0.5, 23.5]
    assert set(labels.text) == {"Fir…"} and all(len(t) <= 4 for t in labels.text)
    assert labels.textfont.color[0] == "#1a1a1a"  # Viridis' yellow (the largest H~): dark text
    assert hm.customdata[0][0] == " First"  # the whole token in the hover


def test_weights_figure_refuses_an_alpha_off_its_colour_scale():
    ro = _rollouts()
    adv = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -1.5])
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        weights_figure(ro, torch.full((8, 3), 0.5), adv, -0.25, 1)  # w_t > 1: white, as if untouched
