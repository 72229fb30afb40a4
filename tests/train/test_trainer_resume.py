"""A resumed QAETrainer keeps the uninterrupted run's generation schedule: TRL's micro-batch counter (``_step``)
comes from the trainer's state when training begins, not from 0 (the embedded model on the CPU)."""

from __future__ import annotations

import pytest
import transformers
from testkit.tiny_runs import tiny_trainer


class _StopAfter(transformers.TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_save, control.should_training_stop = True, True


def _generations(trainer) -> list[int]:
    """The global step at each generation TRL makes (its calls of _generate_and_score_completions)."""
    at, real = [], trainer._generate_and_score_completions

    def spy(inputs):
        at.append(trainer.state.global_step)
        return real(inputs)

    trainer._generate_and_score_completions = spy
    return at


@pytest.mark.slow(seconds=30)
def test_a_resume_inside_a_generation_batchs_reuse_keeps_the_schedule_after_it(tmp_path):
    # planted: _StepFromState left out (TRL's _step from 0 in the new trainer): the resumed run generated at steps 1
    # and 3 where the uninterrupted one generated at 0 and 2 (num_iterations=2: every other step)
    settings = {"max_steps": 4, "max_completion_length": 8, "num_iterations": 2, "save_strategy": "no"}
    whole = tiny_trainer(tmp_path / "whole", **settings)
    at_whole = _generations(whole)
    whole.train()
    assert at_whole == [0, 2]
    first = tiny_trainer(tmp_path / "cut", callbacks=[_StopAfter(1)], **{**settings, "save_strategy": "steps"})
    first.train()
    second = tiny_trainer(tmp_path / "cut", **settings)
    at_cut = _generations(second)
    second.train(resume_from_checkpoint=str(tmp_path / "cut" / "checkpoint-1"))
    # step 1 reused step 0's batch, which no checkpoint holds: the resumed run generates anew there, then keeps time
    assert second.state.global_step == 4 and at_cut == [1, 2]
