"""QAETrainer's live knobs: K, alpha, baseline and token weighting changed between steps, one frozen value."""

from __future__ import annotations

import pytest
import torch
from testkit.step_setup import (
    REWARDS,
    assert_same_grads,
    make_trainer,
    qae_advantages,
    reference_grads,
    rows,
    trainer_grads,
)

from qae_lab.advantages import advantage_stats
from qae_lab.knobs import Knobs
from qae_lab.metric_names import ADVANTAGE_STAT_METRICS


# ---------------------------------------------------------------- 4. live knobs


def test_set_knobs_k_changes_next_advantages_and_metric(tmp_path, tok):
    rewards = [0.0, 1, 1, 0] * 4  # 2 of 4 correct: hard for K = 0.4 (b = 0), easy for K = 0.6 (b = 1)
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo")
    first = trainer._generate_and_score_completions(rows(rewards))["advantages"]
    trainer.set_knobs(quantile_k=0.6)
    assert trainer.knobs.quantile_k == 0.6
    second = trainer._generate_and_score_completions(rows(rewards))["advantages"]
    assert first.tolist() == pytest.approx(qae_advantages(rewards, k=0.4), abs=1e-6)
    assert second.tolist() == pytest.approx(qae_advantages(rewards, k=0.6), abs=1e-6)
    assert bool((first >= 0).all()) and bool((second <= 0).all()) and not torch.equal(first, second)
    metrics = trainer._metrics["train"]
    assert metrics["qae/k"] == [0.4, 0.6]
    assert metrics["qae/hard_frac"] == [1.0, 0.0] and metrics["qae/easy_frac"] == [0.0, 1.0]
    assert metrics["qae/quantile_baseline"] == [1.0, 1.0]
    # every regime statistic of the second step is K = 0.6's, not the config's 0.4 (the regime of each response,
    # prompt_hard, is what the ledger splits by: tests/test_ledger.py follows it into the loss)
    r = torch.tensor(rewards)
    for k, step in ((0.4, 0), (0.6, 1)):
        stats = advantage_stats(r, torch.tensor(qae_advantages(rewards, k=k)), 4, k, success_threshold=0.5)
        for key, name in ADVANTAGE_STAT_METRICS.items():
            assert metrics[name][step] == pytest.approx(stats[key]), (name, k)
    trainer.set_knobs(quantile_k=0.4)
    trainer.set_knobs(quantile_k=0.6)
    assert trainer._generate_and_score_completions(rows(rewards))["prompt_hard"].tolist() == [False] * 16
    trainer.set_knobs(quantile_k=0.4)
    assert trainer._generate_and_score_completions(rows(rewards))["prompt_hard"].tolist() == [True] * 16
    trainer.set_knobs(baseline="mean")
    third = trainer._generate_and_score_completions(rows(rewards))["advantages"]
    assert third.tolist() == pytest.approx(qae_advantages(rewards, baseline="mean"), abs=1e-6)
    assert metrics["qae/quantile_baseline"][-1] == 0.0


def test_set_knobs_alpha_changes_weights_and_metric(tmp_path, tok):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", token_weighting="sa_ah", alpha=0.3, sparse_update=False)
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    adv = qae_advantages(REWARDS)
    before = trainer_grads(trainer, inputs)
    trainer.set_knobs(alpha=1.5)
    after = trainer_grads(trainer, inputs)
    metrics = trainer._metrics["train"]
    assert metrics["saah/alpha"] == [0.3, 1.5]
    assert metrics["saah/w_mean_neg"][1] < metrics["saah/w_mean_neg"][0]  # smaller weights
    assert_same_grads(
        after, reference_grads(trainer.model, inputs, adv, loss_type="bnpo", weighting="sa_ah", alpha=1.5)
    )
    assert max((before[n] - after[n]).abs().max().item() for n in before) > 1e-4
    # token_weighting is live too: AH from the next loss on
    trainer.set_knobs(token_weighting="ah")
    assert_same_grads(
        trainer_grads(trainer, inputs),
        reference_grads(trainer.model, inputs, adv, loss_type="bnpo", weighting="ah", alpha=1.5),
    )


def test_set_knobs_validates(tmp_path, tok):
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo")
    before = trainer.knobs
    for knobs, name in (
        ({"quantile_k": 0.0}, "quantile_k"),
        ({"quantile_k": 1.0}, "quantile_k"),
        ({"quantile_k": float("nan")}, "quantile_k"),
        ({"quantile_k": "0.4"}, "quantile_k"),
        ({"alpha": float("nan")}, "alpha"),
        ({"alpha": float("inf")}, "alpha"),
        ({"baseline": "median"}, "baseline"),
        ({"token_weighting": "sa-ah"}, "token_weighting"),
        ({"k": 0.5}, "unknown knob"),
        ({"quantile_k": 0.5, "beta": 0.1}, "unknown knob"),
        ({"quantile_k": 0.5, "alpha": float("nan")}, "alpha"),
    ):
        with pytest.raises(ValueError, match=name):
            trainer.set_knobs(**knobs)
    assert trainer.knobs is before  # a rejected call changes nothing, not even its valid part
    trainer.set_knobs(quantile_k=0.25, alpha=0.0)
    assert trainer.knobs == Knobs(quantile_k=0.25, alpha=0.0)
    trainer.set_knobs(Knobs(quantile_k=0.7, token_weighting="sa_ah"))  # a whole value, as the live controls hand it
    assert trainer.knobs.as_dict() == {
        "quantile_k": 0.7,
        "alpha": 0.5,
        "baseline": "quantile",
        "token_weighting": "sa_ah",
    }
    with pytest.raises(ValueError, match="knobs must be a qae_lab.knobs.Knobs"):
        trainer.set_knobs({"quantile_k": 0.5})
    dr = make_trainer(tmp_path / "dr", tok, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="loss_type"):
        dr.set_knobs(token_weighting="sa_ah")


def test_set_knobs_k_moves_the_entropy_split(tmp_path, tok):
    # 2 of 4 correct in every group: every prompt hard at K = 0.4 (p = 0.5 <= 0.6), easy at K = 0.6 (p > 0.4); the
    # config's K stays 0.4, so a split computed from the config would put the second step's entropy under "hard"
    rewards = [0.0, 1, 1, 0] * 4
    trainer = make_trainer(tmp_path, tok, loss_type="bnpo", sparse_update=False)
    metrics = trainer._metrics["train"]
    trainer._compute_loss(trainer.model, trainer._generate_and_score_completions(rows(rewards)))
    assert len(metrics["entropy/hard"]) == 1 and "entropy/easy" not in metrics
    trainer.set_knobs(quantile_k=0.6)
    trainer._compute_loss(trainer.model, trainer._generate_and_score_completions(rows(rewards)))
    assert len(metrics["entropy/hard"]) == 1 and len(metrics["entropy/easy"]) == 1
    # the same responses and weights: the whole batch's entropy, under the regime of the K in force
    # the same float32 token entropies summed in the same order: equal to float32 rounding (~100 tokens)
    assert metrics["entropy/easy"][0] == pytest.approx(
        metrics["entropy/hard"][0], rel=128 * torch.finfo(torch.float32).eps
    )
    assert trainer.args.quantile_k == 0.4
