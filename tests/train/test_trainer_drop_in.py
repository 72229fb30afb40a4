"""QAETrainer where it stands in for TRL's GRPOTrainer: ``evaluate()`` with QAE's ``qae/*`` and the ``behaviour/*``
metrics for an evaluation batch smaller than, equal to and larger than the generation batch (a larger one once
crashed: the behaviour metrics read the texts from TRL's completion log, a deque as long as the generation batch), and
completions no reward function can score. The embedded model on the CPU."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tiny_runs import tiny_trainer

from qae_lab.task import rewards
from qae_lab.task.answers import completion_text
from qae_lab.task.data import synthetic_task, to_grpo_dataset
from qae_lab.train import trainer as trainer_module

HELD_OUT = to_grpo_dataset(synthetic_task(8, levels=(2, 3), seed=13))  # 8 problems x 4 completions = 32


@pytest.mark.slow(seconds=20)
@pytest.mark.parametrize("eval_batch", [4, 8, 16], ids=["smaller", "equal", "larger"])  # generation batch: 8
def test_evaluate_scores_every_completion_it_generated(tmp_path, monkeypatch, eval_batch):
    seen, measured = [], []  # what the reward saw, what the behaviour metrics measured: one entry per generation

    def reward(completions, **kwargs):
        seen.append([completion_text(c) for c in completions])
        return correctness(completions, **kwargs)

    def behaviour(lengths, texts, success, **kwargs):
        measured.append(list(texts))
        return behaviour_stats(lengths, texts, success, **kwargs)

    correctness, behaviour_stats = rewards.correctness_reward, trainer_module.behaviour_stats
    reward.__name__ = "correctness_reward"
    monkeypatch.setattr(rewards, "correctness_reward", reward)
    monkeypatch.setattr(trainer_module, "behaviour_stats", behaviour)
    trainer = tiny_trainer(tmp_path, per_device_eval_batch_size=eval_batch, max_completion_length=16)
    assert trainer.args.generation_batch_size == 8
    metrics = trainer.evaluate(eval_dataset=HELD_OUT)
    assert measured == seen and sum(map(len, seen)) == 32  # every completion, each measured in its own batch
    assert {len(texts) for texts in seen} == {eval_batch}  # one generation per evaluation batch
    assert 0.0 <= metrics["eval_reward"] <= 1.0 and 0.0 <= metrics["eval_qae/zero_adv_frac"] <= 1.0
    assert metrics["eval_behaviour/length_mean"] == pytest.approx(metrics["eval_completions/mean_length"])


@pytest.mark.slow(seconds=10)
def test_a_completion_no_reward_function_scores_is_refused_saying_why(tmp_path, monkeypatch):
    def unscorable(completions, **kwargs):
        return [None] * len(completions)

    unscorable.__name__ = "correctness_reward"
    monkeypatch.setattr(rewards, "correctness_reward", unscorable)
    trainer = tiny_trainer(tmp_path, max_steps=1, max_completion_length=8)
    with pytest.raises(
        ValueError, match=r"every one returned None\): TRL leaves such a completion out .* \(0 where one cannot"
    ):
        trainer.train()


def test_a_private_member_trl_no_longer_has_is_named_when_the_trainer_is_made(tmp_path, monkeypatch):
    from trl import GRPOTrainer

    monkeypatch.delattr(GRPOTrainer, "_calculate_rewards")  # as a TRL release that renamed it would
    with pytest.raises(
        ImportError, match=r"trl 1\.\d+\.\d+ with transformers .* lacks: _calculate_rewards \(overridden"
    ):
        tiny_trainer(tmp_path)
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_every_private_member_of_trl_or_transformers_the_trainer_touches_is_listed(tmp_path):
    from trl import GRPOTrainer

    trainer = tiny_trainer(tmp_path)
    assert trainer_module.missing_private_members(trainer) == []
    source = Path(trainer_module.__file__).read_text()
    used = set(re.findall(r"(?:self|super\(\))\.(_[a-z]\w*)", source))
    defs = set(re.findall(r"def (_[a-z]\w*)", source))
    ours = (defs - set(dir(GRPOTrainer))) | set(re.findall(r"self\.(_[a-z]\w*)(?:, self\.\w+)* = ", source))
    ours |= set(re.findall(r"^    (_[a-z]\w*) = ", source, flags=re.M))  # class attributes
    touched = {n for n in (used | defs) - ours if hasattr(trainer, n)}
    # _rotate_checkpoints: used only where it exists (transformers < 5), else the public function
    assert touched - {"_rotate_checkpoints"} == set(trainer_module.PRIVATE_MEMBERS)
