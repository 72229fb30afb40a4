"""A resumed QAETrainer keeps the uninterrupted run's generation schedule: TRL's micro-batch counter (``_step``)
comes from the trainer's state when training begins, not from 0; and the knobs in force at its checkpoint, unless the
resume's config changes one (the embedded model on the CPU)."""

from __future__ import annotations

import shutil

import pytest
import transformers
from testkit.tiny_runs import tiny_trainer

from qae_lab.knobs import Knobs
from qae_lab.train.callbacks import RunLogger


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


class _SetKnobsAt(transformers.TrainerCallback):
    """``trainer.set_knobs(**knobs)`` as step ``step`` begins (a live change, as the notebook's controls make)."""

    def __init__(self, trainer, step: int, **knobs):
        self.trainer, self.step, self.knobs = trainer, step, knobs

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            self.trainer.set_knobs(**self.knobs)


def _row(trainer, step: int) -> dict:
    [row] = [r for r in trainer.state.log_history if r.get("step") == step and "qae/k" in r]
    return row


@pytest.fixture(scope="module")
def live_set_checkpoint(tmp_path_factory):
    """A run launched at K 0.4 without token weighting, set live to K 0.8, SA-AH, alpha 0.7 at step 2, stopped with a
    checkpoint after step 2: (its folder, its config's settings)."""
    out = tmp_path_factory.mktemp("live_set") / "run"
    settings = {"max_steps": 4, "max_completion_length": 8, "quantile_k": 0.4, "token_weighting": "none"}
    first = tiny_trainer(out, callbacks=[_StopAfter(2)], **{**settings, "save_strategy": "steps"})
    first.add_callback(_SetKnobsAt(first, 2, quantile_k=0.8, token_weighting="sa_ah", alpha=0.7))
    first.train()
    row = _row(first, 2)  # the premise: step 2 trained with the knobs set live
    assert (row["qae/k"], row["knobs/token_weighting"], row["saah/alpha"]) == (0.8, "sa_ah", 0.7)
    assert _row(first, 1)["knobs/token_weighting"] == "none" and "saah/alpha" not in _row(first, 1)
    return out, {**settings, "save_strategy": "no"}


@pytest.mark.slow(seconds=30)
def test_a_resume_trains_on_with_the_knobs_in_force_at_its_checkpoint(live_set_checkpoint, tmp_path):
    # planted: KnobsCheckpoint left out, or its knobs not read back: the resumed step 3 logs the config's K 0.4, none
    out, settings = live_set_checkpoint
    cut = tmp_path / "run"
    shutil.copytree(out, cut)
    second = tiny_trainer(cut, **settings)  # the same config: K 0.4, no token weighting
    second.train(resume_from_checkpoint=str(cut / "checkpoint-2"))
    row = _row(second, 3)
    assert (row["qae/k"], row["knobs/token_weighting"], row["saah/alpha"]) == (0.8, "sa_ah", 0.7)
    assert second.knobs == Knobs(quantile_k=0.8, alpha=0.7, token_weighting="sa_ah")


@pytest.mark.slow(seconds=30)
def test_a_resume_that_names_a_new_k_trains_with_it(live_set_checkpoint, tmp_path):
    # planted: the checkpoint's knobs put in force whatever the resume's config says: step 3 logs K 0.8
    out, settings = live_set_checkpoint
    cut = tmp_path / "run"
    shutil.copytree(out, cut)
    second = tiny_trainer(cut, **{**settings, "quantile_k": 0.6})  # the resume command changes K only
    # the lab's run folder refuses such a resume (qae_lab.storage.resume: a resume continues the same experiment);
    # a trainer used as TRL's is, without the run log, may change its config
    second.remove_callback(RunLogger)
    second.train(resume_from_checkpoint=str(cut / "checkpoint-2"))
    row = _row(second, 3)
    assert (row["qae/k"], row["knobs/token_weighting"], row["saah/alpha"]) == (0.6, "sa_ah", 0.7)
