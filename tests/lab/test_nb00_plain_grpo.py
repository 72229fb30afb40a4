"""Tests for qae_lab.lab.nb00_plain_grpo: what notebook 00 prints about a group and about one update, from the numbers."""

from __future__ import annotations

import copy
from types import SimpleNamespace as NS

import pytest
import torch

from qae_lab.advantages import group_advantages
from qae_lab.task.data import synthetic_task
from qae_lab.entropy_controls import ppo_clip_active
from qae_lab.loss import LossSettings, grpo_loss
from qae_lab.task.models import load_policy
from qae_lab.lab.nb00_plain_grpo import UpdateChange, advantage_lines, group_lines, sequence_logps, update_change
from qae_lab.task.rollouts import completion_logps, sample_groups


def test_sequence_logps_sums_real_tokens_only():
    lp = torch.tensor([[-0.5, -1.0, -9.0], [-2.0, -9.0, -9.0]])
    assert sequence_logps(lp, torch.tensor([[1, 1, 0], [1, 0, 0]])).tolist() == [-1.5, -2.0]
    with pytest.raises(ValueError, match="mask"):
        sequence_logps(lp, torch.ones(2, 2))
    with pytest.raises(ValueError, match="logps"):
        sequence_logps(torch.zeros(3), torch.ones(3))


def test_group_and_advantage_lines():
    ro = NS(
        completions=["<answer>\n4\n</answer>", "no answer " * 20],
        rewards=torch.tensor([1.0, 0.0]),
        records=[{"gold": "4"}],
        group_size=2,
    )
    lines = group_lines(ro)
    assert lines[0] == "gold answer 4" and "answer 4 " in lines[1] and "answer -" in lines[2]
    assert lines[2].endswith("…")  # a long text is cut
    with pytest.raises(ValueError, match="advantages"):
        group_lines(ro, torch.zeros(3))
    r = torch.tensor([1.0, 1, 0, 0, 0])
    a = group_advantages(r, 5, baseline="mean")
    out = advantage_lines(r, a)
    assert out[0].startswith("mean R = 0.400, std R = 0.548") and "(2 completions)" in out[1]
    assert f"{a[0].item():+.3f}" in out[1] and f"{a[-1].item():+.3f}" in out[2]
    with pytest.raises(ValueError, match="one group"):
        advantage_lines(r, a[:3])


def test_update_change_counts_directions_and_clip_against_a_loop():
    g = torch.Generator().manual_seed(3)
    mask = (torch.arange(6)[None] < torch.tensor([6, 4, 5, 2, 6, 3])[:, None]).float()  # (N, T)
    before = -torch.rand(6, 6, generator=g) * mask
    after = (before + 0.4 * torch.randn(6, 6, generator=g)) * mask
    adv = torch.tensor([1.0, -1.0, 0.0, 2.0, -0.5, -0.5])
    ro = NS(rewards=torch.tensor([1.0, 0, 0, 1, 0, 0]), mask=mask)
    c = update_change(ro, adv, before, after)
    delta = [sum(after[i, t] - before[i, t] for t in range(6) if mask[i, t]) for i in range(6)]
    assert torch.allclose(c.delta, torch.tensor(delta, dtype=torch.float64), atol=1e-6)
    for sign, rows in (("A > 0", [0, 3]), ("A = 0", [2]), ("A < 0", [1, 4, 5])):
        assert c.moved(sign) == (sum(delta[i] > 0 for i in rows), sum(delta[i] < 0 for i in rows), len(rows))
    want = sum(
        bool(ppo_clip_active(after[i : i + 1, t : t + 1] - before[i : i + 1, t : t + 1], adv[i : i + 1], 0.2, 0.2))
        for i in range(6)
        for t in range(6)
        if mask[i, t]
    )
    assert (c.clipped_tokens, c.tokens) == (want, 26)
    assert c.labels == ["y0 ✓", "y1 ✗", "y2 ✗", "y3 ✓", "y4 ✗", "y5 ✗"]
    up, _, n = c.moved("A > 0")
    assert f"A > 0: {up} of {n} up" in c.title and len(c.lines()) == 6 and len(c.summary_lines()) == 4
    with pytest.raises(ValueError, match="after"):
        update_change(ro, adv, before, after[:, :3])
    with pytest.raises(ValueError, match="same completions"):
        update_change(ro, adv[:4], before, after)
    with pytest.raises(ValueError, match="sign"):
        c.rows("A >= 0")


def test_direction_words():
    c = UpdateChange(["a", "b", "c"], torch.zeros(3), torch.tensor([0.1, 0.0, -0.1]), torch.tensor([1.0, -1, -1]), 0, 3)
    assert (c.direction("A > 0"), c.direction("A < 0"), c.direction("A = 0")) == ("up", "mixed", None)
    flat = UpdateChange(["a"], torch.zeros(1), torch.zeros(1), torch.tensor([-1.0]), 0, 1)
    assert flat.direction("A < 0") == "unchanged"


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
    assert c.direction("A > 0") == "up" and c.direction("A < 0") == "down", c.lines()  # first order at lr 1e-3
