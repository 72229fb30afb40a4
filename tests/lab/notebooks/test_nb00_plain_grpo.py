"""Tests for qae_lab.lab.notebooks.nb00_plain_grpo: what notebook 00 shows about a group and about one update, as table rows
whose numbers are checked against hand computations and loops."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace as NS

import pytest
import torch

from qae_lab.advantages import group_advantages
from qae_lab.task.data import synthetic_task
from qae_lab.entropy_controls import ppo_clip_active
from qae_lab.loss import LossSettings, grpo_loss
from qae_lab.task.models import load_policy
from qae_lab.lab.notebooks.nb00_plain_grpo import (
    change_figure,
    advantage_rows,
    completion_rows,
    sequence_logps,
    sgd_update,
    update_change,
)
from qae_lab.task.rollouts import completion_logps, sample_groups


def test_sequence_logps_sums_real_tokens_only():
    lp = torch.tensor([[-0.5, -1.0, -9.0], [-2.0, -9.0, -9.0]])
    assert sequence_logps(lp, torch.tensor([[1, 1, 0], [1, 0, 0]])).tolist() == [-1.5, -2.0]
    with pytest.raises(ValueError, match="mask"):
        sequence_logps(lp, torch.ones(2, 2))
    with pytest.raises(ValueError, match="logps"):
        sequence_logps(torch.zeros(3), torch.ones(3))


def test_completion_rows():
    ro = NS(
        completions=["<reasoning>2 + 2</reasoning>\n<answer>\n4\n</answer>", "no answer " * 20],
        rewards=torch.tensor([1.0, 0.0]),
    )
    rows = completion_rows(ro, torch.tensor([0.25, -0.25]))
    assert [(r["completion"], r["answer"], r["R"], r["A"]) for r in rows] == [
        ("y0 ✓", "4", 1.0, 0.25),
        ("y1 ✗", None, 0.0, -0.25),
    ]
    assert rows[0]["text"] == "`<reasoning>2 + 2</reasoning>⏎<answer>⏎4⏎</answer>`"  # one line, the tags kept
    assert rows[1]["text"].endswith("…`") and len(rows[1]["text"]) == 62  # a long text is cut to 60 characters
    assert "A" not in completion_rows(ro)[0]
    with pytest.raises(ValueError, match="advantages"):
        completion_rows(ro, torch.zeros(3))


def test_advantage_rows_by_hand():
    r = torch.tensor([1.0, 1, 0, 0, 0])
    rows = advantage_rows(r, group_advantages(r, 5, baseline="mean"))
    # mean 2/5; Bessel's std sqrt((2 * 0.6^2 + 3 * 0.4^2) / 4) = sqrt(0.3); A = (R - 0.4) / (sqrt(0.3) + 1e-6)
    std = math.sqrt(0.3)
    assert [(row["R"], row["completions"]) for row in rows] == [(1.0, 2), (0.0, 3)]
    for row, a in zip(rows, (0.6 / (std + 1e-6), -0.4 / (std + 1e-6))):
        assert row["mean R"] == pytest.approx(0.4, abs=1e-12) and row["std R"] == pytest.approx(std, abs=1e-12)
        assert row["A"] == pytest.approx(a, abs=1e-6)
    with pytest.raises(ValueError, match="one group"):
        advantage_rows(r, r[:3])


def test_update_change_counts_directions_and_clip_against_a_loop():
    g = torch.Generator().manual_seed(3)
    mask = (torch.arange(6)[None] < torch.tensor([6, 4, 5, 2, 6, 3])[:, None]).float()  # (N, T)
    before = -torch.rand(6, 6, generator=g) * mask
    after = (before + 0.4 * torch.randn(6, 6, generator=g)) * mask
    adv = torch.tensor([1.0, -1.0, 0.0, 2.0, -0.5, -0.5])
    ro = NS(rewards=torch.tensor([1.0, 0, 0, 1, 0, 0]), mask=mask)
    c = update_change(ro, adv, before, after)
    delta = [float(sum(after[i, t] - before[i, t] for t in range(6) if mask[i, t])) for i in range(6)]
    assert torch.allclose(c.delta, torch.tensor(delta, dtype=torch.float64), atol=1e-6)
    for sign, rows in (("A > 0", [0, 3]), ("A = 0", [2]), ("A < 0", [1, 4, 5])):
        assert c.moved(sign) == (sum(delta[i] > 0 for i in rows), sum(delta[i] < 0 for i in rows), len(rows))
    assert c.labels == ["y0 ✓", "y1 ✗", "y2 ✗", "y3 ✓", "y4 ✗", "y5 ✗"]
    up, _, n = c.moved("A > 0")
    assert f"A > 0: {up} of {n} up" in c.title
    clipped = [
        sum(
            bool(ppo_clip_active(after[i : i + 1, t : t + 1] - before[i : i + 1, t : t + 1], adv[i : i + 1], 0.2, 0.2))
            for t in range(6)
            if mask[i, t]
        )
        for i in range(6)
    ]
    lengths = [6, 4, 5, 2, 6, 3]
    assert c.clipped.tolist() == clipped and c.lengths.tolist() == lengths
    for row, (sign, rows) in zip(c.summary_rows(), (("A > 0", [0, 3]), ("A = 0", [2]), ("A < 0", [1, 4, 5]))):
        assert row == {
            "advantage": sign,
            "completions": len(rows),
            "more likely": sum(delta[i] > 0 for i in rows),
            "less likely": sum(delta[i] < 0 for i in rows),
            "mean change": pytest.approx(sum(delta[i] for i in rows) / len(rows), abs=1e-6),
            "tokens": sum(lengths[i] for i in rows),
            "clipped": sum(clipped[i] for i in rows),
        }, (sign, row)
    with pytest.raises(ValueError, match="after"):
        update_change(ro, adv, before, after[:, :3])
    with pytest.raises(ValueError, match="same completions"):
        update_change(ro, adv[:4], before, after)
    with pytest.raises(ValueError, match="sign"):
        c.rows("A >= 0")


@pytest.mark.parametrize("correct", [2, 6])
def test_the_first_pass_loss_is_minus_the_mean_advantage_per_token(correct):
    # why notebook 08's TRL run prints a loss of about 0 and QAETrainer's does not: on one pass every ratio is 1,
    # so bnpo's L = -sum_i A_i |y_i| / sum_i |y_i|; the mean baseline's A sum to 0 in a group, QAE's take one sign
    g = torch.Generator().manual_seed(correct)
    rewards = torch.tensor([1.0] * correct + [0.0] * (8 - correct))
    logps = -torch.rand(8, 5, generator=g)
    settings = LossSettings(loss_type="bnpo")
    for lengths in ([5] * 8, [5, 3, 4, 5, 2, 5, 1, 4]):
        mask = (torch.arange(5)[None] < torch.tensor(lengths)[:, None]).float()  # (G, T)
        for baseline in ("mean", "quantile"):
            a = group_advantages(rewards, 8, baseline=baseline, k=0.4)
            loss = grpo_loss(logps.clone().requires_grad_(), a, mask, settings).loss.item()
            want = -sum(a[i].item() * lengths[i] for i in range(8)) / sum(lengths)
            assert loss == pytest.approx(want, abs=1e-6), (lengths, baseline)
            if baseline == "mean" and len(set(lengths)) == 1:
                assert loss == pytest.approx(0.0, abs=1e-6)
            if baseline == "quantile":  # hard (2 of 8): successes only, L < 0; easy (6 of 8): failures only, L > 0
                assert (loss < 0) == (correct == 2) and abs(loss) > 0.1


@pytest.mark.slow(seconds=8)
def test_one_sgd_step_of_the_embedded_model_moves_the_weights_and_each_completion():
    # notebook 00 in a test: sample, score, advantages, loss, one step; small steps move along the advantage
    model, tok = load_policy("embedded", device="cpu")
    start = copy.deepcopy(model.state_dict())
    ro = sample_groups(model, tok, synthetic_task(8, seed=0)[7:], 8, seed=0)
    a = group_advantages(ro.rewards, 8, baseline="mean")
    assert 0 < int(ro.rewards.sum()) < 8  # a mixed group
    logps = completion_logps(model, tok, ro.prompts, ro.completion_ids, ro.mask)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    opt.zero_grad()
    grpo_loss(logps, a, ro.mask, LossSettings(loss_type="bnpo")).loss.backward()
    opt.step()
    assert any(not torch.equal(p, start[name]) for name, p in model.state_dict().items())
    with torch.no_grad():
        after = completion_logps(model, tok, ro.prompts, ro.completion_ids, ro.mask)
    c = update_change(ro, a, logps, after)
    assert c.direction("A > 0") == "up" and c.direction("A < 0") == "down", c.delta  # first order at lr 1e-3


@pytest.mark.slow(seconds=8)
def test_a_large_step_makes_even_the_rewarded_completions_less_likely():
    # notebook 00's prediction: the update again at LR = 0.3, from the weights that sampled (its group of 16)
    model, tok = load_policy("embedded", device="cpu")
    start = copy.deepcopy(model.state_dict())
    ro = sample_groups(model, tok, synthetic_task(8, seed=0)[7:], 16, seed=0)
    a = group_advantages(ro.rewards, 16, baseline="mean")
    settings = LossSettings(loss_type="bnpo", epsilon_low=0.2, epsilon_high=0.2)
    small = sgd_update(model, tok, start, ro, a, 0.02, settings)
    large = sgd_update(model, tok, start, ro, a, 0.3, settings)
    assert small.direction("A > 0") == "up" and small.direction("A < 0") == "down", small.delta
    assert large.direction("A > 0") == "down" and large.direction("A < 0") == "down", large.delta
    assert torch.equal(small.before, large.before)  # both steps start from the sampled weights
    with pytest.raises(ValueError, match="lr must be > 0"):
        sgd_update(model, tok, start, ro, a, 0.0, settings)


def test_change_figure_one_bar_per_item_by_advantage_sign():
    fig = change_figure(
        ["y0", "y1", "y2", "y3"], [-1, -2, -3, -4], [-0.5, -2.5, -3, -3.5], [1, -1, 0, 2], title="t", y_title="change"
    )
    assert [(t.name, list(t.x), list(t.y)) for t in fig.data] == [
        ("A > 0", ["y0", "y3"], [0.5, 0.5]),
        ("A = 0", ["y2"], [0.0]),
        ("A < 0", ["y1"], [-0.5]),
    ]
    assert list(fig.layout.xaxis.categoryarray) == ["y0", "y1", "y2", "y3"]  # the items' order, not the traces'
    assert [list(c) for c in fig.data[2].customdata] == [[-2.0, -2.5, -1.0]]  # before, after, A on hover
    with pytest.raises(ValueError, match="unique"):
        change_figure(["y0", "y0"], [0, 0], [1, 1], [1, 1])
    with pytest.raises(ValueError, match="one value per label"):
        change_figure(["y0", "y1"], [0], [1, 1], [1, 1])
