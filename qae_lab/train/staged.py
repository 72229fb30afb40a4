r"""Checkpoints a run can always resume from: the transformers ``Trainer`` overrides that stage each save and check
each resume (the rules: :mod:`qae_lab.storage.resume`). A save is written into ``<output_dir>/.staging/`` and renamed
into place when complete, so an interrupted save never leaves a half ``checkpoint-N``; a resume names a missing or
damaged file before ``torch.load`` meets it.

Implementer's notes: docs/implementation.md, section ``qae_lab.train.staged``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from transformers.trainer_callback import TrainerState
from transformers.trainer_utils import TrainOutput

from qae_lab.storage.claim import removal_problem
from qae_lab.storage.folder import STAGING_DIR, RunFolderError
from qae_lab.storage.resume import checkpoint_problems, latest_complete_checkpoint, publish_dir

__all__ = ["StagedCheckpoints"]


class _Elsewhere:
    """The trainer as TRL's ``create_model_card`` sees it, with ``args.output_dir`` elsewhere; the trainer's own
    ``args`` are left as they are (another thread reading them sees the run folder)."""

    def __init__(self, trainer, folder: Path):
        self._trainer = trainer
        self.args = _ArgsElsewhere(trainer.args, folder)

    def __getattr__(self, name):
        return getattr(self._trainer, name)


class _ArgsElsewhere:
    def __init__(self, args, folder: Path):
        self._args, self.output_dir = args, str(folder)

    def __getattr__(self, name):
        return getattr(self._args, name)


class StagedCheckpoints:
    r"""Mixin for a transformers ``Trainer``, before it in the bases: ``class T(StagedCheckpoints, GRPOTrainer)``.

    >>> from qae_lab.train.trainer import QAETrainer
    >>> QAETrainer.__mro__[1].__name__, QAETrainer._save_checkpoint is StagedCheckpoints._save_checkpoint
    ('StagedCheckpoints', True)
    """

    _staging = False  # True while _save_checkpoint writes into .staging/

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """``Trainer.train``, the checkpoint to resume checked first (:func:`qae_lab.storage.resume.checkpoint_problems`);
        ``resume_from_checkpoint=True`` takes the latest *complete* checkpoint of ``output_dir``."""
        if resume_from_checkpoint is True:
            latest, notes = latest_complete_checkpoint(self.args.output_dir, load=True)
            if latest is None:
                raise RunFolderError(
                    f"resume_from_checkpoint=True: {self.args.output_dir}/ holds no complete "
                    f"checkpoint" + (f" ({'; '.join(notes)})" if notes else "")
                )
            resume_from_checkpoint = str(latest)
        if resume_from_checkpoint:
            problems = checkpoint_problems(resume_from_checkpoint, load=True)
            if problems:
                raise RunFolderError(f"cannot resume from {resume_from_checkpoint}: " + "; ".join(problems))
            state = TrainerState.load_from_json(os.path.join(resume_from_checkpoint, "trainer_state.json"))
            if 0 < self.args.max_steps <= state.global_step:
                return self._resume_finished(resume_from_checkpoint, state)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _resume_finished(self, checkpoint: str, state) -> TrainOutput:
        """A checkpoint at or past ``max_steps``: load it, run the callbacks' begin and end, train nothing
        (transformers' loop checks the limit only after a step, so it would train one step too many)."""
        self._load_from_checkpoint(checkpoint)
        self.state = state
        self.control = self.callback_handler.on_train_begin(self.args, self.state, self.control)
        self.control = self.callback_handler.on_train_end(self.args, self.state, self.control)
        return TrainOutput(self.state.global_step, 0.0, {})

    def _get_output_dir(self, trial):
        out = super()._get_output_dir(trial)
        return os.path.join(out, STAGING_DIR) if self._staging else out

    def create_model_card(self, *args, **kwargs):
        """TRL's model card (written at every save over ``<output_dir>/README.md``), into the staged checkpoint
        instead; outside a save (``push_to_hub``) into ``<output_dir>/README.md`` only when no such file is there.
        ``python -m qae_lab export`` writes a run's real model card (:func:`qae_lab.runs.export.model_card`)."""
        out = Path(self.args.output_dir)
        if self._staging:
            folder = out / STAGING_DIR / f"checkpoint-{self.state.global_step}"
        elif not (out / "README.md").exists():
            folder = out
        else:
            return None
        folder.mkdir(parents=True, exist_ok=True)
        return super().create_model_card.__func__(_Elsewhere(self, folder), *args, **kwargs)

    def _save_checkpoint(self, model, trial):
        """Write ``checkpoint-N`` into ``<output_dir>/.staging/`` and rename it into place when complete; a complete
        checkpoint of the same step is kept (the state is the same); rotation runs on the run folder after."""
        out = Path(super()._get_output_dir(trial))
        final = out / f"checkpoint-{self.state.global_step}"
        if final.is_dir() and not checkpoint_problems(final):
            return
        staging = out / STAGING_DIR
        if self.args.should_save:
            problem = removal_problem(staging)  # only what a trainer stages there, never a run nested in it
            if problem:
                raise RunFolderError(problem)
            shutil.rmtree(staging, ignore_errors=True)  # an abandoned save's leftovers
        self._staging = True
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging = False
        if self.args.should_save:
            publish_dir(staging / final.name, final)
            if removal_problem(staging) is None:  # empty now, unless something not staged appeared in it meanwhile
                shutil.rmtree(staging, ignore_errors=True)
            if hasattr(self, "_rotate_checkpoints"):  # transformers < 5.x's method, else the function
                self._rotate_checkpoints(use_mtime=True, output_dir=str(out))
            else:
                from transformers.trainer_utils import rotate_checkpoints  # not in transformers 5.0

                rotate_checkpoints(
                    output_dir=str(out),
                    save_total_limit=self.args.save_total_limit,
                    best_model_checkpoint=self.state.best_model_checkpoint,
                    use_mtime=True,
                )
